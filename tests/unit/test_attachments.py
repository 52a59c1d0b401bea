"""adapters.attachments: one attachment shape for every adapter."""

from __future__ import annotations

import pytest

from adapters.attachments import attachment, name_from_url, size_of, text_with, type_from_name


def test_an_attachment_always_has_the_four_keys_null_where_unknown() -> None:
    assert attachment("a.png", "image/png", 3, "https://x/a.png") == {
        "name": "a.png",
        "type": "image/png",
        "size": 3,
        "url": "https://x/a.png",
    }
    assert attachment("", None, None, "", kind="m.file") == {
        "name": None,
        "type": None,
        "size": None,
        "url": None,
        "kind": "m.file",
    }


@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("https://h.example/f/My%20Report%C3%A9.pdf", "My Reporté.pdf"),
        ("https://h.example/f/a.png?token=1#frag", "a.png"),
        ("https://h.example/dir/", "dir"),
        ("https://h.example", None),
    ],
)
def test_a_name_is_the_urls_last_segment_decoded(url: str, name: str | None) -> None:
    assert name_from_url(url) == name


def test_a_type_from_a_known_extension_only() -> None:
    assert type_from_name("photo.JPG") == "image/jpeg"
    assert type_from_name("notes.pdf") == "application/pdf"
    assert type_from_name("no-extension") is None
    assert type_from_name("file.unknownext") is None
    assert type_from_name(None) is None


@pytest.mark.parametrize(
    ("value", "size"),
    [(12, 12), ("12", 12), (" 7 ", 7), (0, 0), (-1, None), ("big", None), (True, None)],
)
def test_a_stated_size_or_null(value: object, size: int | None) -> None:
    assert size_of(value) == size


def test_the_text_is_kept_and_a_file_alone_is_named_by_its_url() -> None:
    files = [attachment("a.png", None, None, "https://x/a.png"), attachment("b", None, None, None)]
    assert text_with("look", files) == "look"
    assert text_with("", files) == "https://x/a.png\nb"
    assert text_with("", []) == ""
