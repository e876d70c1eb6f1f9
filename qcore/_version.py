"""The version of qcore, in one place: the package, the build and the instance rows read it."""

__version__ = "0.1.0"
