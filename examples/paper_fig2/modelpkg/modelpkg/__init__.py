"""The sample model of the paper's Fig. 2: PCA features into an MLP, on the digits data."""
