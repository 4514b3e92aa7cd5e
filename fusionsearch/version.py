"""The package version: ground level, so that the CLI and the study identity read it without importing the
whole package."""

__version__ = "0.1.0"
