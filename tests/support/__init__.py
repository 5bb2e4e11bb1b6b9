"""Test-only code: helpers, the batch oracle, and the fault-injection batch hook."""
