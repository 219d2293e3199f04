"""HeteroSim: iteration time of LLM training on heterogeneous clusters, and why."""
__version__ = "0.1.0"
