from setuptools import setup

# As in the paper's Fig. 3: the code base declares its own dependencies.
setup(
    name="modelpkg",
    version="0.1.0",
    packages=["modelpkg"],
    install_requires=["torch>=0.4.1", "numpy", "scikit-learn"],
)
