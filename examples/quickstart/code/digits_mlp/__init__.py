"""The quickstart's user code base: one model class with the paper's ``score`` method."""
