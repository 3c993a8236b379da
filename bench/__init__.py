"""The benchmarks, as one tool: ``python -m bench <name> [--quick]`` (``python -m bench`` lists
them). Every benchmark writes ``bench/results/<name>.json`` through ``bench.common`` (the machine
and its load recorded), and ``python -m bench summarize`` renders the README's tables and inline
values from those files."""
