"""What a family takes from a service request and what its runs report to the service's
metrics, declared on the family so the service builds any family without naming one."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from rse_fast.methods.defaults import STOP_EPSILON


@dataclass(frozen=True)
class RequestField:
    """One request field a family reads: its kind, its range or choices, and its default.

    ``nullable``: a request may send it as null to turn what it sets off (the value is then
    None). ``cap``: the :class:`rse_fast.serve.requests.Caps` attribute an operator bounds it
    by (its ``--max-…`` flag is named in the refusal).
    """

    name: str
    kind: type
    default: Any
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] = ()
    nullable: bool = False
    cap: str | None = None


#: the fields more than one family reads, declared once
STOP_FIELD = RequestField("stop_epsilon", float, None, lo=1e-4, hi=0.5, nullable=True)
#: sc's stop reaches plain sc's accuracy for less (docs/cost-and-stopping.md): on by default
MEASURED_STOP_FIELD = replace(STOP_FIELD, default=STOP_EPSILON)
CONFIDENCE_FIELD = RequestField("confidence", bool, False)


@dataclass(frozen=True)
class RunCounter:
    """A counter a family adds to the service's metrics: its runs split by one yes/no
    ``label``, and the tokens of ``role`` the "no" runs spent for nothing."""

    name: str
    label: str
    help: str
    wasted_name: str
    wasted_role: str
    wasted_help: str


@dataclass(frozen=True)
class RunReport:
    """One run's entry in its family's :class:`RunCounter`."""

    counter: RunCounter
    flag: bool
