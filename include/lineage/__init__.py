"""Lineage: what each job reads and writes and where each column comes from, derived from the registry
(:mod:`.graph`); `lakehouse lineage <table>` answers it by table."""
