"""The Connect codecs every Connect server here uses: protobuf binary as connectrpc
ships it, and a strict JSON codec (`StrictJSONCodec`).

protobuf's JSON parser, as connectrpc configures it, ignores unknown fields (a typo'd
`opt` is dropped without a word), decodes a `bytes` field's base64 leniently (invalid
characters are skipped, so `!!!notb64` is stored as other bytes) and answers a `null`
body with Python's own TypeError text. The strict codec refuses all three with a
message naming the field, as the REST facade does: a request either means what it says
or changes nothing.
"""

from __future__ import annotations

import json
import re
from typing import Any

from connectrpc.compat import google_protobuf_binary_codec
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

# Standard or URL-safe alphabet, padding optional (proto3 JSON accepts both).
_BASE64_RE = re.compile(r"[A-Za-z0-9+/]*={0,2}|[A-Za-z0-9_-]*={0,2}")


class StrictJSONCodec:
    """Connect's `json` codec: proto3 JSON, refusing unknown fields, invalid base64 in
    bytes fields, and any body that is not one JSON object."""

    def name(self) -> str:
        return "json"

    def encode(self, message: Message) -> bytes:
        return json_format.MessageToJson(message).encode()

    def decode(self, data: bytes | bytearray, message_class: type[Message]) -> Message:
        type_name = message_class.DESCRIPTOR.name
        try:
            obj = json.loads(data)
        except RecursionError:
            raise ValueError("the body nests too deep") from None
        except (ValueError, UnicodeDecodeError) as e:
            raise ValueError(f"the body is not JSON: {e}") from None
        if not isinstance(obj, dict):
            raise ValueError(f"the body must be a JSON object (a {type_name}), not {_kind(obj)}")
        check_bytes_fields(obj, message_class.DESCRIPTOR, "")
        message = message_class()
        try:
            json_format.ParseDict(obj, message, ignore_unknown_fields=False)
        except json_format.ParseError as e:
            raise ValueError(_short_parse_error(str(e))) from None
        except RecursionError:
            raise ValueError("the body nests too deep") from None
        return message


def codecs() -> list[Any]:
    """The codecs for `JobsServiceASGIApplication(..., codecs=codecs())`."""
    return [google_protobuf_binary_codec(), StrictJSONCodec()]


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "an array"}.get(
        type(value), type(value).__name__
    )


def _short_parse_error(text: str) -> str:
    # protobuf lists every field of the message after an unknown one; the name is enough.
    head, sep, _ = text.partition("Available Fields")
    return head.rstrip(" .") if sep else text


def _field(desc: Descriptor, key: str) -> FieldDescriptor | None:
    return desc.fields_by_name.get(key) or next((f for f in desc.fields if f.json_name == key), None)


def check_bytes_fields(obj: dict, desc: Descriptor, path: str) -> None:
    """Refuse a bytes field (at any depth) whose value is not valid base64."""
    for key, value in obj.items():
        f = _field(desc, key) if isinstance(key, str) else None
        if f is None or value is None:
            continue  # unknown keys are ParseDict's to refuse
        where = f"{path}{f.name}"
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            value_field = f.message_type.fields_by_name["value"]
            if isinstance(value, dict):
                for k, v in value.items():
                    _check_value(value_field, v, f"{where}[{k}]")
            continue
        if f.is_repeated and isinstance(value, list):
            for i, v in enumerate(value):
                _check_value(f, v, f"{where}[{i}]")
        else:
            _check_value(f, value, where)


def _check_value(f: FieldDescriptor, value: Any, where: str) -> None:
    if f.type == FieldDescriptor.TYPE_BYTES:
        if isinstance(value, str) and not _valid_base64(value):
            raise ValueError(f"{where}: is not valid base64")
    elif f.message_type is not None and isinstance(value, dict):
        check_bytes_fields(value, f.message_type, where + ".")


def _valid_base64(text: str) -> bool:
    if not _BASE64_RE.fullmatch(text):
        return False
    return len(text.rstrip("=")) % 4 != 1
