"""An RSE engine against the scripted model, with the mechanism settings its replies assume
and fast retries."""

from __future__ import annotations

from rse_fast.encoder import Encoder
from rse_fast.llm.client import LLMClient
from rse_fast.llm.retry import RetryPolicy
from rse_fast.rse.config import RSEConfig
from rse_fast.rse.engine import RSE

from fakes.scripted_model import MECHANISM

FAST = RetryPolicy(max_attempts=2, base_delay_s=0.001, max_delay_s=0.002)


def make_rse(url: str, encoder: Encoder, **cfg) -> RSE:
    client = LLMClient(url, "scripted", retry=FAST)
    return RSE(client, encoder, RSEConfig(**{"rounds": 3, "k": 4, **MECHANISM, **cfg}))
