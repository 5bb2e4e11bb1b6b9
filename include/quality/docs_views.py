"""The Data Docs' views: GE's own, with their Jinja templates compiled once per process.

GE makes a new site builder, so new Jinja environments, for every `build_data_docs`, and each compiled every
template it rendered again: two thirds of a build's rendering (py-spy over `make test`), ~15% of a `lakehouse quality
run` of the demo's lakehouse (docs/benchmarks.md). The views below are GE's, named in include/gx/great_expectations.yml
(`view:` of the site's index and section builders); their environments share one cache of compiled templates, which
Jinja keys by the template's name and file and checks against its source.
"""

from __future__ import annotations

import jinja2
from great_expectations.render.view import DefaultJinjaIndexPageView, DefaultJinjaPageView


class CompiledTemplates(jinja2.BytecodeCache):
    """This process's compiled templates, in memory; `compiled` and `reused` count what it did."""

    def __init__(self) -> None:
        self._code: dict[str, bytes] = {}
        self.compiled = 0
        self.reused = 0

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        code = self._code.get(bucket.key)
        if code is not None:
            bucket.bytecode_from_string(code)  # Jinja drops it if the template's source changed
            self.reused += bucket.code is not None

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        self._code[bucket.key] = bucket.bytecode_to_string()
        self.compiled += 1


COMPILED_TEMPLATES = CompiledTemplates()


class PageView(DefaultJinjaPageView):
    """GE's page of a suite or a validation result."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.env.bytecode_cache = COMPILED_TEMPLATES


class IndexPageView(DefaultJinjaIndexPageView):
    """GE's index page."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.env.bytecode_cache = COMPILED_TEMPLATES
