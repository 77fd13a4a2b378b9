"""GRPO_RIG_LIGER_EAGER=1: liger's chunked GRPO loss without torch.compile.

ms-swift 3.6.4 builds liger's LigerFusedLinearGRPOLoss with its default `compiled=True`
(swift/trainers/rlhf_trainer/grpo_trainer.py, GRPOTrainer.__init__), so liger 0.6.1 wraps each chunk's forward
and backward in torch.compile and marks the sequence dimension dynamic
(liger_kernel/chunked_loss/fused_linear_ppo.py, LigerFusedLinearPPOBase.forward). Each chunk of the
completion mask is a view of ms-swift's mask, and when a later batch makes dynamo recompile, torch 2.6 fails
on the view's base: `AssertionError: s12 (could be from ["L['attention_mask_chunk']._base.size()[1]"]) not in
{...}`. Seen first with the TCM recipe on one card (one run of three died before step 1), then on demand on
the lent H200 (docs/gpu-evidence.md, 2026-12-04): the embedded model with liger at micro-batch 6 and up to
512-token completions failed 3 of 3 compiled, before step 1; eager it completed 40 of 40 steps twice. A lever
the planner turns on by itself must not be a coin toss: here the loss runs eagerly. It is still computed a
chunk at a time, so the full logits are never held (the memory the planner counts for liger); at micro-batch
8, where compiled runs did complete, eager trained no slower (1 min 39 s for 20 steps against 1 min 51-54 s,
side by side).
"""

from __future__ import annotations

import functools

from entrypoint.child.hooks.base import After, Hook, Target

GRPO_LOSS = "liger_kernel.chunked_loss.grpo_loss"


def _eager(grpo_loss) -> None:
    """LigerFusedLinearGRPOLoss(..., compiled=...) always eager: its __init__ keeps `compiled`, which its
    forward hands to LigerFusedLinearPPOBase.forward, the one place torch.compile is called."""
    cls = grpo_loss.LigerFusedLinearGRPOLoss
    original = cls.__init__

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.compiled = False

    cls.__init__ = __init__


def install(value: str, after: After) -> None:
    """On with "1" (the plan sets it wherever the trainer uses liger's loss)."""
    if value == "1":
        after.patch(GRPO_LOSS, _eager)


HOOK = Hook(
    name="liger_eager",
    variable="GRPO_RIG_LIGER_EAGER",
    targets=(
        Target(GRPO_LOSS, "LigerFusedLinearGRPOLoss.__init__", "36f381b3c811575e"),  # keeps self.compiled
        Target(GRPO_LOSS, "LigerFusedLinearGRPOLoss.forward", "494e6b28f0b69031"),  # passes it on
        # where `compiled` wraps the chunks' forward and backward in torch.compile
        Target(
            "liger_kernel.chunked_loss.fused_linear_ppo",
            "LigerFusedLinearPPOBase.forward",
            "c0f226d6c2c44934",
        ),
    ),
    upstream=("liger-kernel==0.6.1", "torch==2.6.0", "ms-swift==3.6.4"),
    why="torch 2.6's dynamo can fail recompiling liger's chunked GRPO loss when the completion lengths "
    "change (the mask's chunks are views; AssertionError on `attention_mask_chunk._base.size()[1]`): one of "
    "three identical runs died before step 1. Eager, the loss is still computed a chunk at a time.",
    saves="runs that died before their first step (3 of 3 at micro-batch 6 on the embedded model, compiled); "
    "no speed lost where compiled runs completed (20 steps: 1 min 39 s eager, 1 min 51-54 s compiled; "
    "docs/gpu-evidence.md, 2026-12-04)",
    delete_when="when the image's torch recompiles liger's chunked loss on views without the assertion (a "
    "torch after 2.6 with liger's compiled loss run over changing lengths: tests/gpu/test_levers.py with "
    "DISABLE_HOOKS=liger_eager), or ms-swift passes compiled=False itself",
    install=install,
)
