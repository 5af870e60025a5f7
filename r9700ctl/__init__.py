"""r9700ctl: provision AMD Radeon AI PRO R9700 nodes and prove they perform."""

__version__ = "0.1.0"
