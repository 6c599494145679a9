"""Model rules: where the target model is read from and how it is authenticated."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from disaggspec.api.effective import pool
from disaggspec.api.v1alpha1 import CacheVolume, DisaggSpecService, DisaggSpecServiceSpec, ModelSpec, ModelVolume
from disaggspec.constants import COMPILE_CACHE_ENV, MODEL_CACHE_ENV, POOLS
from disaggspec.validation._cel import quote, string_list
from disaggspec.validation._core import Cel, Rule

HF_TOKEN_ENV: Final = "HF_TOKEN"
"""Set from spec.model.hfTokenSecretRef when that is given."""


def _hf_token_env(service: DisaggSpecService) -> Iterator[str]:
    """With model.hfTokenSecretRef the operator sets HF_TOKEN itself; a second HF_TOKEN in env would be ambiguous."""
    if service.spec.model.hf_token_secret_ref is None:
        return
    for p in POOLS:
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
        for p in POOLS
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


# ---- caches --------------------------------------------------------------------------------------------------------


def _caches(service: DisaggSpecService) -> Iterator[tuple[str, CacheVolume]]:
    spec = service.spec
    if spec.model.cache is not None:
        yield "spec.model.cache", spec.model.cache
    if spec.engine.compile_cache is not None:
        yield "spec.engine.compileCache", spec.engine.compile_cache


def cache_places(service: DisaggSpecService) -> Iterator[tuple[str, CacheVolume]]:
    """Every cache of the spec, with its field path (for the content rules on its sources)."""
    return _caches(service)


def _cache_source(service: DisaggSpecService) -> Iterator[str]:
    """A cache becomes one Pod volume, which has exactly one source."""
    for path, cache in _caches(service):
        if (cache.host_path is None) == (cache.persistent_volume_claim is None):
            yield path


CACHE_ONE_SOURCE: Final = Rule(
    id="cache-one-source",
    fields=("spec.model.cache", "spec.engine.compileCache"),
    message="spec.model.cache and spec.engine.compileCache each need exactly one of persistentVolumeClaim or "
    "hostPath: set one source and remove the other",
    check=_cache_source,
    cel=Cel(
        CacheVolume,
        "has(self.hostPath) != has(self.persistentVolumeClaim)",
        on_node="the rule is about which of the cache's two sources are set, so it names the cache itself",
    ),
)


def _cache_and_volume(service: DisaggSpecService) -> Iterator[str]:
    """Weights come either from a volume the user filled or from a cache the operator fills, not both: with both,
    which copy the servers load would depend on model.path's form, and HF_HUB_OFFLINE would hide the difference."""
    if service.spec.model.cache is not None and service.spec.model.volume is not None:
        yield "spec.model.cache"


CACHE_VOLUME_EXCLUSIVE: Final = Rule(
    id="model-cache-volume-exclusive",
    fields=("spec.model.cache", "spec.model.volume"),
    message="spec.model.cache and spec.model.volume are exclusive: use the volume for weights you place yourself "
    "(model.path an absolute path below its mountPath), or the cache for Hugging Face repos the operator downloads",
    check=_cache_and_volume,
    cel=Cel(ModelSpec, "!has(self.cache) || !has(self.volume)", ".cache"),
)


def _env_rule(rule_id: str, field: str, has: str, names: tuple[str, ...], what: str) -> Rule:
    """A pool's env may not set the variables the operator renders for the cache at `field`."""

    def check(service: DisaggSpecService) -> Iterator[str]:
        cached = service.spec.model.cache if field == "spec.model.cache" else service.spec.engine.compile_cache
        if cached is None:
            return
        for p in POOLS:
            for index, env in enumerate(pool(service.spec, p).env):
                if env.name in names:
                    yield f"spec.{p}.env[{index}]"

    return Rule(
        id=rule_id,
        fields=(field, "spec.prefill.env", "spec.decode.env"),
        message=f"{field} sets {what} on both pools: remove them from spec.<pool>.env (the pool named in the field "
        f"path)",
        check=check,
        cel=tuple(
            Cel(
                DisaggSpecServiceSpec,
                f"!({has}) || !has(self.{p}.env) || self.{p}.env.all(e, !(e.name in {string_list(names)}))",
                f".{p}.env",
            )
            for p in POOLS
        ),
    )


MODEL_CACHE_ENV_RULE: Final = _env_rule(
    "model-cache-env", "spec.model.cache", "has(self.model.cache)", MODEL_CACHE_ENV, ", ".join(MODEL_CACHE_ENV)
)
COMPILE_CACHE_ENV_RULE: Final = _env_rule(
    "compile-cache-env",
    "spec.engine.compileCache",
    "has(self.engine) && has(self.engine.compileCache)",
    COMPILE_CACHE_ENV,
    ", ".join(COMPILE_CACHE_ENV),
)
