"""Which recipe values are hidden as secrets (entrypoint/redact.py): every token ms-swift takes, and no
argument that only looks like one (a hidden value is one a rerun cannot repeat)."""

from __future__ import annotations

from entrypoint import redact
from entrypoint.recipe import swift_schema


def test_of_ms_swifts_arguments_exactly_the_tokens_and_secrets_are_hidden():
    hidden = {
        kind: {n for n in swift_schema.load(kind) if redact.is_secret(n)} for kind in ("rlhf", "rollout")
    }
    assert hidden == {
        "rlhf": {"hub_token", "push_to_hub_token", "swanlab_lark_secret", "swanlab_token"},
        "rollout": {"api_key", "hub_token"},
    }


def test_a_reft_layer_key_is_kept_in_a_listing_and_a_token_is_not():
    shown = redact.env({"REFT_LAYER_KEY": "block_0", "HF_TOKEN": "hf_abcdef123456"})
    assert shown == {"REFT_LAYER_KEY": "block_0", "HF_TOKEN": redact.REDACTED}
