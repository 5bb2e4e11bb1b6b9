"""The S3 server the product runs for a lakehouse on object storage (`lakehouse storage up`): :mod:`.server`. It may
import the daemons, settings and storage."""
