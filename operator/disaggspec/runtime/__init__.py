"""The controller runtime: what runs the reconcile passes, owned by one `controller.Controller`.

kopf delivers the DisaggSpecServices' events and serves the webhook; everything else a controller needs is here,
because kopf sends no label selector, its indexes stall start-up, and the Python client has no informer:

- `controller`: the `Controller`, which owns everything below and starts it; reads the API (LISTs), writes nothing.
- `informer`: LIST + WATCH of each owned kind into the child cache; reads only.
- `caches`: the watch-fed caches of children and of DisaggSpecServices; no API access.
- `workqueue`: the de-duplicating work queue and its workers; no API access (the passes it runs write).
- `leader`: Lease leader election; writes its Lease.
- `health`: what /healthz and /readyz answer from; no API access.
- `availability`: which optional APIs (LeaderWorkerSet) the cluster serves, as the informers saw; no API access.
- `webhook_config`: the webhook server that writes its ValidatingWebhookConfiguration.
- `webhook_certs`, `cert_reload`: a self-signed serving certificate; a restart when the mounted one changes.

Every request goes through `apply.Client`. Nothing here imports `reconcile`: the controller runs passes through the
`controller.Reconcile` protocol, which the entry point fills with the `reconcile.Reconciler`.
"""
