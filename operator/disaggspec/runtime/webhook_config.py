"""The ValidatingWebhookConfiguration `disaggspec.io`, written by the operator itself rather than kopf's managed mode.

Writes to the API: that one configuration (server-side apply), each time the webhook server it serves with starts.
The `Controller` owns the `ConfiguringWebhookServer` (built from `WebhookOptions`), and kopf serves with it.

kopf's managed mode hard-codes `timeoutSeconds: 30` (the maximum): with failurePolicy Ignore, an operator that
accepts connections but stalls delays every DisaggSpecService write by that long before the API server gives up. It
also lists `v1beta1` review versions and creates a MutatingWebhookConfiguration nobody uses. Here the entry is a pure
function of the client config kopf's server yields (URL or Service, CA bundle) and the timeout (default 5 s), and
`ConfiguringWebhookServer` server-side applies it each time kopf's server (re)starts with a (new) certificate.

Every replica serves the same webhook and writes the same entry (the chart's Service routes to any ready replica), so
the configuration is never deleted nor emptied on exit: a replica shutting down must not unregister the others.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import kopf

from disaggspec import apply
from disaggspec import constants as c
from disaggspec.runtime import pod_ports
from disaggspec.runtime.health import Health

log = logging.getLogger("disaggspec.webhookconfig")

CONFIGURATION_NAME = c.GROUP
"""The ValidatingWebhookConfiguration's name (the chart creates it empty and owns it)."""
WEBHOOK_NAME = f"validate.{c.GROUP}"
HANDLER_ID = "validate"
"""The id of the `kopf.on.validate` handler (`handlers.enable_webhook`): kopf routes `<root>/<id>` to it."""
DEFAULT_TIMEOUT_SECONDS = 5
WEBHOOK_CONFIGURATION = apply.Kind(
    "admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "validatingwebhookconfigurations"
)
HEALTH_COMPONENT = "webhook"
RETRY_SECONDS = (1.0, 2.0, 5.0, 10.0, 30.0)
"""Backoff between failed applies of the configuration (the last one repeats)."""


def configuration_path() -> str:
    """The REST path of the cluster-scoped configuration."""
    return f"/apis/{WEBHOOK_CONFIGURATION.api_version}/{WEBHOOK_CONFIGURATION.plural}/{CONFIGURATION_NAME}"


def with_handler_id(client_config: dict[str, Any], handler_id: str = HANDLER_ID) -> dict[str, Any]:
    """The client config pointing at one handler: its id appended to the URL or the Service path, as kopf does."""
    config = copy.deepcopy(client_config)
    quoted = urllib.parse.quote(handler_id)
    if config.get("url") is not None:
        config["url"] = f"{config['url'].rstrip('/')}/{quoted}"
    if config.get("service") is not None:
        config["service"]["path"] = f"{config['service'].get('path') or ''}/{quoted}"
    return {k: v for k, v in config.items() if v is not None}


def webhook_entry(client_config: dict[str, Any], timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS) -> dict[str, Any]:
    """The `webhooks[]` entry validating DisaggSpecService creates and updates at the given client config."""
    if not 1 <= timeout_seconds <= 30:
        raise ValueError(f"webhook timeoutSeconds must be within 1-30, not {timeout_seconds}")
    return {
        "name": WEBHOOK_NAME,
        "rules": [
            {
                "apiGroups": [c.GROUP],
                "apiVersions": [c.VERSION],
                "resources": [c.PLURAL],
                "operations": ["CREATE", "UPDATE"],
                "scope": "Namespaced",
            }
        ],
        "clientConfig": with_handler_id(client_config),
        # Ignore: with the operator down, the CRD's CEL rules still apply and reconcile refuses what only these catch.
        "failurePolicy": "Ignore",
        "sideEffects": "None",
        "matchPolicy": "Equivalent",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": timeout_seconds,
    }


def configuration(client_config: dict[str, Any], timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS) -> dict[str, Any]:
    """The whole ValidatingWebhookConfiguration to server-side apply (only the fields the operator owns)."""
    return {
        "apiVersion": WEBHOOK_CONFIGURATION.api_version,
        "kind": WEBHOOK_CONFIGURATION.kind,
        "metadata": {"name": CONFIGURATION_NAME},
        "webhooks": [webhook_entry(client_config, timeout_seconds)],
    }


def apply_configuration(client: apply.Client, manifest: dict[str, Any]) -> dict[str, Any]:
    """Server-side apply `manifest` (field manager `disaggspec-operator`, forced: the operator owns the entry)."""
    query = {"fieldManager": c.FIELD_MANAGER, "force": "true"}
    return client.request("PATCH", configuration_path(), query, manifest, "application/apply-patch+yaml")


@dataclass
class WebhookOptions:
    """How the admission webhook is served (the entry point's flags)."""

    addr: str
    port: int
    host: str | None
    certfile: str | None = None
    pkeyfile: str | None = None
    cafile: str | None = None


class ConfiguringWebhookServer(kopf.WebhookServer):
    """kopf's webhook server that also registers itself: each client config it yields is applied first.

    Readiness waits for the first successful apply (`health` component `webhook`); a failed apply is retried with
    backoff while liveness counts the failure against the grace period.
    """

    def __init__(
        self,
        *,
        client: apply.Client,
        health: Health,
        timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        webhook_entry({}, timeout_seconds)  # refuse a bad timeout at start-up, not at the first yield
        self.client = client
        self.health = health
        self.timeout_seconds = timeout_seconds
        health.expect(HEALTH_COMPONENT)

    @classmethod
    def serving(
        cls, client: apply.Client, health: Health, options: WebhookOptions, timeout_seconds: int
    ) -> ConfiguringWebhookServer:
        """kopf's webhook server for `options`, registering itself in the ValidatingWebhookConfiguration."""
        return cls(
            client=client,
            health=health,
            timeout_seconds=timeout_seconds,
            addr=options.addr,
            port=options.port,
            host=options.host,
            certfile=options.certfile,
            pkeyfile=options.pkeyfile,
            cafile=options.cafile,
        )

    async def __call__(self, fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        async for client_config in super().__call__(fn):
            await self.register(dict(client_config))
            yield client_config

    async def register(self, client_config: dict[str, Any]) -> None:
        """Apply the configuration for `client_config`, retrying until it is accepted."""
        manifest = configuration(client_config, self.timeout_seconds)
        attempt = 0
        while True:
            try:
                await asyncio.to_thread(apply_configuration, self.client, manifest)
                # The host-port webhook of pool pods (runtime.pod_ports) is served by the same server.
                ports_config = with_handler_id(client_config, pod_ports.HANDLER_ID)
                ports_manifest = pod_ports.configuration(ports_config, self.timeout_seconds)
                await asyncio.to_thread(pod_ports.apply_configuration, self.client, ports_manifest)
            except Exception as error:
                delay = RETRY_SECONDS[min(attempt, len(RETRY_SECONDS) - 1)]
                attempt += 1
                self.health.report(HEALTH_COMPONENT, False, f"cannot register the webhook configuration: {error}")
                log.warning(
                    "could not apply ValidatingWebhookConfiguration %s (retrying in %.0fs): %s",
                    CONFIGURATION_NAME,
                    delay,
                    error,
                )
                await asyncio.sleep(delay)
                continue
            target = manifest["webhooks"][0]["clientConfig"]
            where = target.get("url") or target.get("service")
            log.info("registered the validating webhook at %s (timeout %ds)", where, self.timeout_seconds)
            self.health.report(HEALTH_COMPONENT, True, "serving")
            return
