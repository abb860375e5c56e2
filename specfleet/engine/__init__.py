"""The prompt-lookup engine: plain Python over one `Runner` seam.

Nothing in this package (outside `runners/`) imports mlx, torch, ray or sqlalchemy.
"""
