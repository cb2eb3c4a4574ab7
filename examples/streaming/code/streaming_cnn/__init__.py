"""A small PyTorch CNN tuned on synthetic images that the job's data service streams."""
