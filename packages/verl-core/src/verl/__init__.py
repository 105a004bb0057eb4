__path__ = __import__("pkgutil").extend_path(__path__, __name__)

# verl: RL post-training for LLMs in the HybridFlow design (single controller over SPMD workers).
# The line above must stay first (DESIGN rule 1) so sibling distributions can add verl.workers etc.
# `import verl` is cheap: heavy modules load on first use. `from verl import DataProto` loads torch, not Ray.

__version__ = "0.1.0"

__all__ = ["DataProto", "DataProtoFuture", "__version__"]


def __getattr__(name):
    # Lazy so that `import verl` (and `import verl.workers` from sibling distributions) stays cheap.
    if name in ("DataProto", "DataProtoFuture"):
        from verl import protocol

        return getattr(protocol, name)
    raise AttributeError(f"module 'verl' has no attribute {name!r}")
