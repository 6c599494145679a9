"""Model rules: where the target model is read from and how it is authenticated."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from disaggspec.api.effective import POOL_NAMES, pool
from disaggspec.api.v1alpha1 import DisaggSpecService, DisaggSpecServiceSpec, ModelSpec, ModelVolume
from disaggspec.validation._cel import quote
from disaggspec.validation._core import Cel, Rule

HF_TOKEN_ENV: Final = "HF_TOKEN"
"""Set from spec.model.hfTokenSecretRef when that is given."""


def _hf_token_env(service: DisaggSpecService) -> Iterator[str]:
    """With model.hfTokenSecretRef the operator sets HF_TOKEN itself; a second HF_TOKEN in env would be ambiguous."""
    if service.spec.model.hf_token_secret_ref is None:
        return
    for p in POOL_NAMES:
        for index, env in enumerate(pool(service.spec, p).env):
            if env.name == HF_TOKEN_ENV:
                yield f"spec.{p}.env[{index}]"


HF_TOKEN_IN_ENV: Final = Rule(
    id="model-hf-token-env",
    fields=("spec.model.hfTokenSecretRef", "spec.prefill.env", "spec.decode.env"),
    message="spec.model.hfTokenSecretRef already sets HF_TOKEN: remove HF_TOKEN from spec.<pool>.env (the pool named "
    "in the field path), or remove spec.model.hfTokenSecretRef",
    check=_hf_token_env,
    # One CEL rule per pool, so the API server names the pool whose env repeats HF_TOKEN.
    cel=tuple(
        Cel(
            DisaggSpecServiceSpec,
            f"!has(self.model.hfTokenSecretRef) || !has(self.{p}.env) || "
            f"self.{p}.env.all(e, e.name != {quote(HF_TOKEN_ENV)})",
            f".{p}.env",
        )
        for p in POOL_NAMES
    ),
)


def _volume_source(service: DisaggSpecService) -> Iterator[str]:
    """A Pod volume has exactly one source; the model volume becomes one."""
    volume = service.spec.model.volume
    if volume is not None and (volume.host_path is None) == (volume.persistent_volume_claim is None):
        yield "spec.model.volume"


VOLUME_ONE_SOURCE: Final = Rule(
    id="model-volume-one-source",
    fields=("spec.model.volume.hostPath", "spec.model.volume.persistentVolumeClaim"),
    message="spec.model.volume needs exactly one of spec.model.volume.hostPath or "
    "spec.model.volume.persistentVolumeClaim: set one source and remove the other",
    check=_volume_source,
    cel=Cel(
        ModelVolume,
        "has(self.hostPath) != has(self.persistentVolumeClaim)",
        on_node="the rule is about which of the volume's two sources are set, so it names the volume itself",
    ),
)


def _local_path_volume(service: DisaggSpecService) -> Iterator[str]:
    """An absolute model path is read from the pod's filesystem; without a volume it does not exist there."""
    if service.spec.model.path.startswith("/") and service.spec.model.volume is None:
        yield "spec.model.volume"


LOCAL_PATH_VOLUME: Final = Rule(
    id="model-local-path-volume",
    fields=("spec.model.path", "spec.model.volume"),
    message="an absolute spec.model.path is read from a volume: set spec.model.volume, or use a Hugging Face repo id",
    check=_local_path_volume,
    cel=Cel(ModelSpec, "!self.path.startsWith('/') || has(self.volume)", ".volume"),
)
