"""Presentation: terminal tables, JSON documents and files.  Formats; never computes a figure."""

from __future__ import annotations

from tensorledger.report.files import write_atomic
from tensorledger.report.json import SCHEMA_VERSION, to_json, to_jsonable

__all__ = ["SCHEMA_VERSION", "to_json", "to_jsonable", "write_atomic"]
