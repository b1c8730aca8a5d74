"""Ingestion validation: every bad input is rejected with its reason, every good pair survives intact."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from data_recipes.image_cache import build_image_cache, load_image_cache
from data_recipes.validate import (
    REJECT_COLUMNS,
    REJECT_REASONS,
    ImageRejected,
    RejectBudgetExceeded,
    enforce_reject_budget,
    load_image_rgb,
    reject_counts,
    validate_records,
)
from tests.fixtures.bad_files import (
    write_empty,
    write_html,
    write_placeholder,
    write_png,
    write_png_header_only,
    write_solid,
    write_truncated,
)

# ---------------------------------------------------------------- row checks


def test_validate_records_rejects_each_bad_row_with_its_reason_and_normalises_whitespace():
    manifest = pd.DataFrame(
        {
            "pair_id": ["a", "b", "c", "d", "e", "f", "a", "g", "h", None, "b", "i", "j"],
            "image_path": [f"/img/{i}.jpg" for i in range(13)],
            "text": [
                "A photo\tof a\n\ncat",  # kept, whitespace normalised
                "",  # empty_text
                "  \t\n ",  # whitespace_text
                b"\xff\xfe broken",  # invalid_utf8 (bytes that do not decode)
                "lone \ud800 surrogate",  # invalid_utf8 (lone surrogate)
                "nul\x00byte",  # nul_bytes
                "duplicate of a",  # duplicate_pair_id
                None,  # empty_text (missing)
                "caf\xc3\xa9".encode("latin-1"),  # valid UTF-8 bytes: kept as 'café'
                "no id",  # missing_pair_id
                "b again, good text",  # duplicate_pair_id even though the first 'b' was rejected
                "  plain  ",  # kept
                1984,  # a caption a CSV reader parsed as a number: kept as '1984'
            ],
        },
        dtype=object,
    )
    kept, rejects = validate_records(manifest)

    assert list(rejects.columns) == list(REJECT_COLUMNS)
    assert reject_counts(rejects) == {
        "missing_pair_id": 1,
        "duplicate_pair_id": 2,
        "empty_text": 2,
        "whitespace_text": 1,
        "invalid_utf8": 2,
        "nul_bytes": 1,
    }
    assert list(zip(rejects["pair_id"], rejects["reason"], strict=True)) == [
        ("b", "empty_text"),
        ("c", "whitespace_text"),
        ("d", "invalid_utf8"),
        ("e", "invalid_utf8"),
        ("f", "nul_bytes"),
        ("a", "duplicate_pair_id"),
        ("g", "empty_text"),
        ("", "missing_pair_id"),
        ("b", "duplicate_pair_id"),
    ]
    assert rejects["reason"].isin(REJECT_REASONS).all()
    assert len(kept) + len(rejects) == len(manifest)
    assert kept["pair_id"].tolist() == ["a", "h", "i", "j"]
    assert kept["text"].tolist() == ["A photo of a cat", "café", "plain", "1984"]
    assert kept["image_path"].tolist() == ["/img/0.jpg", "/img/8.jpg", "/img/11.jpg", "/img/12.jpg"]


# ---------------------------------------------------------------- image checks


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda d: d / "never_written.jpg", "missing_image"),
        (lambda d: write_empty(d / "zero.jpg"), "empty_file"),
        (lambda d: write_html(d / "error_page.jpg"), "not_an_image"),
        (lambda d: write_truncated(d / "cut.jpg", seed=1), "truncated_image"),
        (lambda d: write_truncated(d / "cut.png", seed=2), "truncated_image"),
        # PIL's own hard limit (2 x MAX_IMAGE_PIXELS) fires while opening
        (lambda d: write_png_header_only(d / "huge.png", 30000, 30000), "decompression_bomb"),
        # 64 M pixels is under PIL's hard limit: only our header check refuses it
        (lambda d: write_png_header_only(d / "big.png", 8000, 8000), "decompression_bomb"),
        (lambda d: write_png(d / "garbage.png", 8, 8, b"not zlib data at all"), "unreadable_image"),
    ],
)
def test_load_image_rgb_rejects_bad_files_with_the_right_reason(tmp_path, make, reason):
    path = make(tmp_path)
    with pytest.raises(ImageRejected) as caught:
        load_image_rgb(path)
    assert caught.value.reason == reason
    assert caught.value.detail


def test_decompression_bomb_is_refused_from_the_header_before_decoding(tmp_path):
    """A header-only PNG cannot be decoded, so 'decompression_bomb' proves the refusal came first."""
    path = write_png_header_only(tmp_path / "claims_big.png", 300, 300)
    with pytest.raises(ImageRejected) as caught:
        load_image_rgb(path, max_pixels=300 * 300 - 1)
    assert caught.value.reason == "decompression_bomb"
    with pytest.raises(ImageRejected) as caught:
        load_image_rgb(path, max_pixels=300 * 300)
    assert caught.value.reason == "truncated_image"


def test_cmyk_jpeg_becomes_rgb(tmp_path):
    path = tmp_path / "cmyk.jpg"
    Image.new("CMYK", (32, 32), (0, 255, 255, 0)).save(path, quality=95)  # pure red in CMYK
    image = load_image_rgb(path)
    assert image.mode == "RGB"
    assert np.abs(np.asarray(image, dtype=int) - [255, 0, 0]).max() <= 3


def test_palette_with_transparency_is_flattened_on_white(tmp_path):
    palette_image = Image.new("P", (20, 10), 0)
    palette_image.putpalette([0, 255, 0] + [255, 0, 0] + [0, 0, 0] * 254)
    palette_image.paste(1, (10, 0, 20, 10))  # right half red, left half the transparent green
    path = tmp_path / "palette.png"
    palette_image.save(path, transparency=0)
    pixels = np.asarray(load_image_rgb(path))
    assert (pixels[:, :10] == [255, 255, 255]).all()
    assert (pixels[:, 10:] == [255, 0, 0]).all()


def test_la_and_rgba_alpha_is_flattened_on_white(tmp_path):
    la = np.zeros((10, 20, 2), dtype=np.uint8)
    la[:, :, 0] = 40
    la[:, :10, 1] = 255  # left half opaque dark grey, right half fully transparent
    path = tmp_path / "la.png"
    Image.fromarray(la, mode="LA").save(path)
    pixels = np.asarray(load_image_rgb(path))
    assert (pixels[:, :10] == 40).all()
    assert (pixels[:, 10:] == 255).all()

    rgba = np.zeros((10, 10, 4), dtype=np.uint8)
    rgba[..., :3] = (0, 0, 200)
    rgba[..., 3] = 128  # half transparent blue over white
    path = tmp_path / "rgba.png"
    Image.fromarray(rgba, mode="RGBA").save(path)
    pixel = np.asarray(load_image_rgb(path))[0, 0].astype(int)
    assert np.abs(pixel - [127, 127, 227]).max() <= 1


def test_sixteen_bit_grayscale_is_scaled_not_clipped(tmp_path):
    values = np.array([[0, 257, 32896, 65535]], dtype=np.uint16)
    path = tmp_path / "depth16.png"
    Image.fromarray(values).save(path)
    assert Image.open(path).mode.startswith("I")
    pixels = np.asarray(load_image_rgb(path))
    assert pixels.dtype == np.uint8
    assert pixels[0, :, 0].tolist() == [0, 1, 128, 255]
    assert (pixels[..., 0] == pixels[..., 1]).all() and (pixels[..., 1] == pixels[..., 2]).all()


def test_exif_orientation_is_applied(tmp_path):
    """Stored 40x20 with red left / blue right and orientation 6 (rotate 90 clockwise to display)."""
    stored = Image.new("RGB", (40, 20), (0, 0, 255))
    stored.paste((255, 0, 0), (0, 0, 20, 20))
    exif = Image.Exif()
    exif[0x0112] = 6
    path = tmp_path / "rotated.jpg"
    stored.save(path, exif=exif.tobytes(), quality=95)
    image = load_image_rgb(path)
    assert image.size == (20, 40)
    pixels = np.asarray(image, dtype=int)
    assert np.abs(pixels[5, 10] - [255, 0, 0]).max() < 20  # the left side is now on top
    assert np.abs(pixels[35, 10] - [0, 0, 255]).max() < 20


# ---------------------------------------------------------------- the image cache and the whole chain


def test_cache_rejects_exactly_the_bad_images_and_every_survivor_keeps_its_own_pixels(tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    rows: list[tuple[str, str, str]] = []
    colours: dict[str, tuple[int, int, int]] = {}
    for i in range(6):
        colour = (40 * i, 255 - 30 * i, (70 * i) % 256)
        path = write_solid(images / f"good{i}.png", colour, size=(48 + 8 * i, 32))
        rows.append((f"good{i}", str(path), f"caption {i}"))
        colours[f"good{i}"] = colour
    shared = write_solid(images / "shared.png", (10, 20, 30))  # one image, three captions (COCO-like)
    for k in range(3):
        rows.append((f"shared{k}", str(shared), f"shared caption {k}"))
        colours[f"shared{k}"] = (10, 20, 30)
    for k in range(2):  # the same picture at two paths: below the placeholder count, kept
        rows.append((f"twin{k}", str(write_solid(images / f"twin{k}.png", (99, 1, 1))), "twin"))
        colours[f"twin{k}"] = (99, 1, 1)
    for k in range(5):
        rows.append((f"placeholder{k}", str(write_placeholder(images / f"gone{k}.png")), "deleted photo"))
    rows.append(("missing", str(images / "absent.jpg"), "missing"))
    rows.append(("empty", str(write_empty(images / "zero.jpg")), "empty"))
    rows.append(("html", str(write_html(images / "page.jpg")), "html"))
    rows.append(("cut", str(write_truncated(images / "cut.jpg", seed=3)), "cut"))
    rows.append(("bomb", str(write_png_header_only(images / "bomb.png", 9000, 9000)), "bomb"))
    # text problems caught before any image is opened
    rows.append(("blank", str(images / "good0.png"), "   "))
    rows.append(("good0", str(images / "good1.png"), "duplicate id"))
    manifest = pd.DataFrame(rows, columns=["pair_id", "image_path", "text"])

    kept, text_rejects = validate_records(manifest)
    out = tmp_path / "cache" / "images_32.npy"
    out.parent.mkdir()
    result = build_image_cache(kept, 32, out, placeholder_min_paths=5, workers=2)
    all_rejects = pd.concat([text_rejects, result.rejects], ignore_index=True)

    assert reject_counts(all_rejects) == {
        "duplicate_pair_id": 1,
        "whitespace_text": 1,
        "missing_image": 1,
        "empty_file": 1,
        "not_an_image": 1,
        "truncated_image": 1,
        "decompression_bomb": 1,
        "placeholder_image": 5,
    }
    expected_kept = [f"good{i}" for i in range(6)] + ["shared0", "shared1", "shared2", "twin0", "twin1"]
    assert result.pair_ids == expected_kept
    assert len(result.pair_ids) + len(all_rejects) == len(manifest)
    assert result.stats["n_distinct_images"] == len(set(kept["image_path"]))
    assert result.stats["n_placeholder_images"] == 1

    cache = load_image_cache(out)
    assert cache.shape == (len(expected_kept), 32, 32, 3) and cache.dtype == np.uint8
    for row, pair_id in enumerate(result.pair_ids):
        assert (cache[row] == colours[pair_id]).all(), pair_id
    assert sorted(p.name for p in out.parent.iterdir()) == ["images_32.npy"]  # no temp files left

    text_of = dict(zip(kept["pair_id"], kept["text"], strict=True))
    assert [text_of[p] for p in result.pair_ids[:3]] == ["caption 0", "caption 1", "caption 2"]

    enforce_reject_budget(len(manifest), all_rejects, budget=0.6)
    with pytest.raises(RejectBudgetExceeded) as caught:
        enforce_reject_budget(len(manifest), all_rejects, budget=0.5)
    message = str(caught.value)
    assert f"rejected {len(all_rejects)} of {len(manifest)}" in message
    assert "placeholder_image=5" in message and "--reject-budget" in message


def test_cache_resizes_shorter_side_and_centre_crops(tmp_path):
    """A 60x20 image with three 20x20 colour blocks: only the middle block survives the centre crop."""
    image = Image.new("RGB", (60, 20), (255, 0, 0))
    image.paste((0, 255, 0), (20, 0, 40, 20))
    image.paste((0, 0, 255), (40, 0, 60, 20))
    image.save(tmp_path / "wide.png")
    manifest = pd.DataFrame({"pair_id": ["w"], "image_path": [str(tmp_path / "wide.png")], "text": ["x"]})
    result = build_image_cache(manifest, 10, tmp_path / "c.npy")
    cache = load_image_cache(tmp_path / "c.npy")
    assert result.pair_ids == ["w"]
    assert np.abs(cache[0, :, 2:8].astype(int) - [0, 255, 0]).max() <= 2


def test_cache_with_every_image_rejected_is_an_empty_array(tmp_path):
    manifest = pd.DataFrame({"pair_id": ["x"], "image_path": [str(tmp_path / "nope.jpg")], "text": ["t"]})
    result = build_image_cache(manifest, 16, tmp_path / "empty.npy")
    assert result.pair_ids == [] and reject_counts(result.rejects) == {"missing_image": 1}
    assert load_image_cache(tmp_path / "empty.npy").shape == (0, 16, 16, 3)


def test_reject_budget_edges():
    rejects = pd.DataFrame({"pair_id": ["a"], "reason": ["empty_text"], "detail": [""]})
    enforce_reject_budget(10, rejects, budget=0.1)  # exactly at the budget is allowed
    with pytest.raises(RejectBudgetExceeded):
        enforce_reject_budget(10, rejects, budget=0.09)
    with pytest.raises(ValueError, match="fraction"):
        enforce_reject_budget(10, rejects, budget=5)
