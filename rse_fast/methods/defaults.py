"""The settings the measurements chose, in one place: where a name asks for a rule (``+stop``,
``+conf-online``) and where the service and the README's first examples use the measured
default. Each was chosen on a dev cell; docs/decisions.md has the numbers."""

from __future__ import annotations

#: The statistical stop's ε (the Beta criterion at 1 - ε): the frontier's dev cell chose it
#: (bench/results/frontier.json, ``chosen_on_dev``).
STOP_EPSILON = 0.1
#: The share of samples the online confidence rule keeps above its threshold (dev-chosen,
#: as ``STOP_EPSILON``).
ONLINE_KEEP = 0.9
