"""The adversarial corpus of issue 15 and the tool that measures how much of it passes admission.

`corpus.py` holds the bad DisaggSpecService specs as data (each an edit of an example, with its class and why it
would break serving), written before the validation code changes; `measure.py` sends every spec to a private local
control plane with the CRD and the operator's webhook, and reports what was refused, admitted, half-applied or
rejected only at reconcile.
"""
