"""Content rules: the strings the operator passes on verbatim (image references, model ids, revisions and names on
the SGLang command line, object names and paths in the pod spec) have the form their reader takes.

Without them a bad string is found late and far away: the kubelet reports InvalidImageName, argparse reads a model
path of `-h` as the help flag and both servers exit, the API server refuses the child Deployment after the other
children were applied. Each rule is a pattern from `_syntax`, the same in Python and CEL.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from disaggspec.api.v1alpha1 import (
    CacheClaim,
    DisaggSpecService,
    DraftModel,
    HostPathVolume,
    KeySelector,
    LocalObjectReference,
    ModelSpec,
    ModelVolume,
    PersistentVolumeClaimVolume,
    RouterSpec,
    SecretKeyRef,
    SGLangSpec,
)
from disaggspec.validation import _places
from disaggspec.validation._cel import quote
from disaggspec.validation._core import Rule
from disaggspec.validation._places import node_rule
from disaggspec.validation._syntax import (
    ABSOLUTE_PATH,
    DNS_SUBDOMAIN,
    DOT_SEGMENT,
    HF_REPO_ID,
    IMAGE_REFERENCE,
    NORMAL_PATH,
    REVISION,
    SERVED_NAME,
    found,
    full,
)
from disaggspec.validation.model import cache_places as _caches

# ---- images ------------------------------------------------------------------------------------------------------


def _sglang(service: DisaggSpecService) -> Iterator[tuple[str, SGLangSpec]]:
    yield "spec.sglang", service.spec.sglang


def _router(service: DisaggSpecService) -> Iterator[tuple[str, RouterSpec]]:
    yield "spec.router", service.spec.router


IMAGE_REFERENCE_FORM: Final = node_rule(
    "image-reference",
    ("spec.sglang.image", "spec.router.image"),
    "spec.sglang.image and spec.router.image must be image references: [host[:port]/]path[:tag][@sha256:<64 hex "
    "digits>] with lowercase path components and no whitespace, for example disaggspec/sglang:v0.5.23-disaggspec; "
    "fix the reference",
    checks=(
        (
            SGLangSpec,
            _sglang,
            lambda s: full(IMAGE_REFERENCE, s.image),
            f"self.image.matches({quote(IMAGE_REFERENCE)})",
            ".image",
        ),
        (
            RouterSpec,
            _router,
            lambda r: r.image is None or full(IMAGE_REFERENCE, r.image),
            f"!has(self.image) || self.image.matches({quote(IMAGE_REFERENCE)})",
            ".image",
        ),
    ),
)


# ---- model and draft model strings on the command line -----------------------------------------------------------


def _model_path_ok(path: str) -> bool:
    """A Hub repo id (the Hub forbids '--' and '..' in one) or an absolute path without '.'/'..' segments: anything
    else is either a flag to argparse (a leading '-'), a URL SGLang tries as a local path, or a download that fails."""
    repo = full(HF_REPO_ID, path) and "--" not in path and ".." not in path
    return repo or (full(ABSOLUTE_PATH, path) and not found(DOT_SEGMENT, path))


def _model_path_cel(expr: str) -> str:
    return (
        f"({expr}.matches({quote(HF_REPO_ID)}) && !{expr}.contains('--') && !{expr}.contains('..')) || "
        f"({expr}.matches({quote(ABSOLUTE_PATH)}) && !{expr}.matches({quote(DOT_SEGMENT)}))"
    )


def _model(service: DisaggSpecService) -> Iterator[tuple[str, ModelSpec]]:
    yield "spec.model", service.spec.model


MODEL_PATH: Final = node_rule(
    "model-path-form",
    ("spec.model.path", "spec.speculative.draftModel.path"),
    "spec.model.path and every draftModel.path (spec.speculative and the pools' overrides) must be a Hugging Face "
    "repo id ([owner/]name of letters, digits, '_', '.', '-', no '--' or '..') or an absolute path without "
    "whitespace or '..' segments: fix the path (a leading '-' would be read as a server flag)",
    checks=(
        (ModelSpec, _model, lambda m: _model_path_ok(m.path), _model_path_cel("self.path"), ".path"),
        (DraftModel, _places.draft_models, lambda d: _model_path_ok(d.path), _model_path_cel("self.path"), ".path"),
    ),
)


def _revision_ok(revision: str | None) -> bool:
    """A git ref or commit as the Hub resolves it; '..' is not allowed in a git ref."""
    return revision is None or (full(REVISION, revision) and ".." not in revision and "//" not in revision)


_REVISION_CEL: Final = (
    f"!has(self.revision) || (self.revision.matches({quote(REVISION)}) && !self.revision.contains('..') && "
    "!self.revision.contains('//'))"
)

MODEL_REVISION: Final = node_rule(
    "model-revision-form",
    ("spec.model.revision", "spec.speculative.draftModel.revision"),
    "spec.model.revision and every draftModel.revision must be a branch, tag or commit: letters, digits, '_', '.', "
    "'-' and '/', starting with a letter, digit or '_', without '..' or '//': fix the revision",
    checks=(
        (ModelSpec, _model, lambda m: _revision_ok(m.revision), _REVISION_CEL, ".revision"),
        (DraftModel, _places.draft_models, lambda d: _revision_ok(d.revision), _REVISION_CEL, ".revision"),
    ),
)

SERVED_MODEL_NAME: Final = node_rule(
    "model-served-name-form",
    ("spec.model.servedModelName",),
    "spec.model.servedModelName must not start with '-' nor contain whitespace or control characters (it is passed "
    "as --served-model-name): fix the name",
    checks=(
        (
            ModelSpec,
            _model,
            lambda m: m.served_model_name is None or full(SERVED_NAME, m.served_model_name),
            f"!has(self.servedModelName) || self.servedModelName.matches({quote(SERVED_NAME)})",
            ".servedModelName",
        ),
    ),
)


# ---- object names ------------------------------------------------------------------------------------------------


def _pull_secrets(service: DisaggSpecService) -> Iterator[tuple[str, LocalObjectReference]]:
    for index, ref in enumerate(service.spec.sglang.image_pull_secrets):
        yield f"spec.sglang.imagePullSecrets[{index}]", ref


def _claim(service: DisaggSpecService) -> Iterator[tuple[str, PersistentVolumeClaimVolume]]:
    volume = service.spec.model.volume
    if volume is not None and volume.persistent_volume_claim is not None:
        yield "spec.model.volume.persistentVolumeClaim", volume.persistent_volume_claim


def _cache_claims(service: DisaggSpecService) -> Iterator[tuple[str, CacheClaim]]:
    for path, cache in _caches(service):
        if cache.persistent_volume_claim is not None:
            yield f"{path}.persistentVolumeClaim", cache.persistent_volume_claim


def _token(service: DisaggSpecService) -> Iterator[tuple[str, SecretKeyRef]]:
    if service.spec.model.hf_token_secret_ref is not None:
        yield "spec.model.hfTokenSecretRef", service.spec.model.hf_token_secret_ref


def _env_key_refs(service: DisaggSpecService) -> Iterator[tuple[str, KeySelector]]:
    for path, env in _places.env_vars(service):
        source = env.value_from
        if source is not None and source.secret_key_ref is not None:
            yield f"{path}.valueFrom.secretKeyRef", source.secret_key_ref
        if source is not None and source.config_map_key_ref is not None:
            yield f"{path}.valueFrom.configMapKeyRef", source.config_map_key_ref


_SUBDOMAIN_CEL: Final = f"self.name.matches({quote(DNS_SUBDOMAIN)})"

OBJECT_NAMES: Final = node_rule(
    "object-name-form",
    (
        "spec.sglang.imagePullSecrets",
        "spec.model.volume.persistentVolumeClaim.claimName",
        "spec.model.cache.persistentVolumeClaim.claimName",
        "spec.engine.compileCache.persistentVolumeClaim.claimName",
        "spec.model.hfTokenSecretRef.name",
        "spec.prefill.env",
        "spec.decode.env",
    ),
    "spec.sglang.imagePullSecrets[].name, the persistentVolumeClaim.claimName of spec.model.volume, "
    "spec.model.cache and spec.engine.compileCache, spec.model.hfTokenSecretRef.name and "
    "spec.<pool>.env[].valueFrom secretKeyRef/configMapKeyRef names must be object names (DNS subdomains: "
    "lowercase letters, digits, '-' and '.', alphanumeric at both ends): use the "
    "object's exact name",
    checks=(
        (LocalObjectReference, _pull_secrets, lambda r: full(DNS_SUBDOMAIN, r.name), _SUBDOMAIN_CEL, ".name"),
        (
            PersistentVolumeClaimVolume,
            _claim,
            lambda c: full(DNS_SUBDOMAIN, c.claim_name),
            f"self.claimName.matches({quote(DNS_SUBDOMAIN)})",
            ".claimName",
        ),
        (
            CacheClaim,
            _cache_claims,
            lambda c: full(DNS_SUBDOMAIN, c.claim_name),
            f"self.claimName.matches({quote(DNS_SUBDOMAIN)})",
            ".claimName",
        ),
        (SecretKeyRef, _token, lambda r: full(DNS_SUBDOMAIN, r.name), _SUBDOMAIN_CEL, ".name"),
        (KeySelector, _env_key_refs, lambda r: full(DNS_SUBDOMAIN, r.name), _SUBDOMAIN_CEL, ".name"),
    ),
)


# ---- paths -------------------------------------------------------------------------------------------------------


def _host_path(service: DisaggSpecService) -> Iterator[tuple[str, HostPathVolume]]:
    volume = service.spec.model.volume
    if volume is not None and volume.host_path is not None:
        yield "spec.model.volume.hostPath", volume.host_path
    for path, cache in _caches(service):
        if cache.host_path is not None:
            yield f"{path}.hostPath", cache.host_path


HOST_PATH: Final = node_rule(
    "model-host-path-form",
    (
        "spec.model.volume.hostPath.path",
        "spec.model.cache.hostPath.path",
        "spec.engine.compileCache.hostPath.path",
    ),
    "spec.model.volume.hostPath.path (and the hostPath.path of spec.model.cache and spec.engine.compileCache) "
    "must be an absolute path without whitespace or '.'/'..' segments (the API server refuses '..' in a hostPath): "
    "give the directory's plain absolute path",
    checks=(
        (
            HostPathVolume,
            _host_path,
            lambda h: full(ABSOLUTE_PATH, h.path) and not found(DOT_SEGMENT, h.path),
            f"self.path.matches({quote(ABSOLUTE_PATH)}) && !self.path.matches({quote(DOT_SEGMENT)})",
            ".path",
        ),
    ),
)

_SYSTEM_MOUNT: Final = r"^/(dev|proc|sys)(/|$)"
"""Mount points the runtime and the operator own: /dev holds the GPU and NIC device nodes and the operator's /dev/shm
(disaggspec/render/pool.py), /proc and /sys are the kernel's."""


def _volume(service: DisaggSpecService) -> Iterator[tuple[str, ModelVolume]]:
    if service.spec.model.volume is not None:
        yield "spec.model.volume", service.spec.model.volume


def _mount_path_ok(path: str) -> bool:
    """Normalized (one spelling per directory, so /dev/shm/ cannot pass as another path than /dev/shm), not /, and
    not over a system or operator-owned mount."""
    return full(NORMAL_PATH, path) and not found(DOT_SEGMENT, path) and not found(_SYSTEM_MOUNT, path)


MOUNT_PATH: Final = node_rule(
    "model-mount-path-form",
    ("spec.model.volume.mountPath",),
    "spec.model.volume.mountPath must be a normalized absolute path (no trailing '/', no '.' or '..' segments, no "
    "whitespace), not / and not under /dev (the operator mounts /dev/shm there, the device plugins put GPUs and NICs "
    "there), /proc or /sys: mount the weights elsewhere, for example /models",
    checks=(
        (
            ModelVolume,
            _volume,
            lambda v: _mount_path_ok(v.mount_path),
            f"self.mountPath.matches({quote(NORMAL_PATH)}) && !self.mountPath.matches({quote(DOT_SEGMENT)}) && "
            f"!self.mountPath.matches({quote(_SYSTEM_MOUNT)})",
            ".mountPath",
        ),
    ),
)

RULES: Final[tuple[Rule, ...]] = (
    IMAGE_REFERENCE_FORM,
    MODEL_PATH,
    MODEL_REVISION,
    SERVED_MODEL_NAME,
    OBJECT_NAMES,
    HOST_PATH,
    MOUNT_PATH,
)
"""This module's rules in table order."""
