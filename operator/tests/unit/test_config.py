"""config.from_env: DISAGGSPEC_* variables override the defaults; a resync period that is not positive is refused."""

from __future__ import annotations

import pytest

from disaggspec.config import from_env


def test_defaults_without_variables() -> None:
    config = from_env({})
    assert config.resync_seconds == 300.0
    assert config.namespaces == ()
    assert config.router_image == ""


def test_variables_override_the_defaults() -> None:
    config = from_env(
        {
            "DISAGGSPEC_RESYNC_SECONDS": "2.5",
            "DISAGGSPEC_NAMESPACES": "a, b,",
            "DISAGGSPEC_ROUTER_IMAGE": "router:1",
        }
    )
    assert config.resync_seconds == 2.5
    assert config.namespaces == ("a", "b")
    assert config.router_image == "router:1"


@pytest.mark.parametrize("value", ["0", "-5", "soon", "nan", ""])
def test_a_resync_period_that_is_not_positive_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match="DISAGGSPEC_RESYNC_SECONDS must be a positive number of seconds"):
        from_env({"DISAGGSPEC_RESYNC_SECONDS": value})


def test_kube_system_is_denied_by_default() -> None:
    assert from_env({}).denied_namespaces == ("kube-system",)


@pytest.mark.parametrize(
    ("value", "denied"),
    [
        ("kube-system,kube-public", ("kube-system", "kube-public")),
        (" ops , ,ops,infra ", ("ops", "infra")),
        ("", ()),
        (" , ", ()),
    ],
)
def test_denied_namespaces_come_from_a_comma_list(value: str, denied: tuple[str, ...]) -> None:
    assert from_env({"DISAGGSPEC_DENIED_NAMESPACES": value}).denied_namespaces == denied
