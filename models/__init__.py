"""Model manifests and small tokenizer files, installed as the ``rse_fast.models`` package."""
