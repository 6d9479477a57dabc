"""lanebook: the DGX Spark DeepSeek-V4-Flash lane recipe as runbooks, a node library and a digital twin."""

__version__ = "0.1.0"
