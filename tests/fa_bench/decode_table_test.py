#!/usr/bin/env python3
"""bench/decode_table.py on a synthetic decode record: the table's row holds each backend's TB/s,
the paged and append ratios over both query counts, and the verdict counts each target from the
record's own times (cells below cuDNN named, the bandwidth floor at 80% of the copy ceiling)."""
import json
import os
import subprocess
import sys
import tempfile

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench",
                      "decode_table.py")


def row(b, s, sq, backend, ms, tbps, page=0, append=False, nbytes=1e9):
    return {"b": b, "s_k": s, "s_q": sq, "page_size": page, "append": append,
            "backend": backend, "ms": ms, "tbps": tbps, "bytes": nbytes}


def main():
    rows = []
    for sq, ours_ms in ((1, 1.0), (4, 2.0)):
        rows += [row(8, 4096, sq, "flashattn", ours_ms, 3.0),
                 row(8, 4096, sq, "torch-cudnn", ours_ms * (0.9 if sq == 1 else 1.5), 2.5),
                 row(8, 4096, sq, "torch-fa2", ours_ms * 1.2, 2.0),
                 row(8, 4096, sq, "flashattn", ours_ms / 0.9, 2.7, page=16),
                 row(8, 4096, sq, "flashattn", ours_ms / 0.99, 2.9, page=256),
                 row(8, 4096, sq, "flashattn", ours_ms * 1.10, 2.8, append=True)]
    record = {"gpu": "test GPU", "driver": "0", "commit": "abc", "rows": rows,
              "ceilings": {"copy_tb_s": 4.0}}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "r.json")
        with open(path, "w") as f:
            json.dump(record, f)
        out = subprocess.run([sys.executable, SCRIPT, path], capture_output=True, text=True,
                             check=True).stdout
    lines = out.splitlines()
    table_row = [l for l in lines if l.startswith("| 8 | 4k |")]
    assert len(table_row) == 1, out
    cells = [c.strip() for c in table_row[0].strip("|").split("|")]
    assert cells[2:8] == ["**3.00**", "2.50", "2.00", "**3.00**", "2.50", "2.00"], cells
    assert cells[8] == "0.90–0.90" and cells[9] == "0.99–0.99", cells
    assert cells[10] == "1.10–1.10", cells
    text = "\n".join(lines)
    # cuDNN: 0.9 (q1) and 1.5 (q4); FA2 1.2 both.
    assert "ours / cuDNN" in text and "1 of 2 cells ≥ 1" in text, text
    assert "below 1: b8×4k q1 0.90" in text, text
    assert "ours / FA2 (time ratio, above 1 = ours faster): geometric mean 1.20, 2 of 2" in text, text
    # 80% of 4.0 TB/s is 3.2: neither cell (3.0) reaches it.
    assert "0 of 2 cells ≥ 3.20 TB/s" in text, text
    assert "paged / dense: 2 of 4 ≥ 0.95" in text, text
    assert "append time / plain: 0 of 2 within 5%" in text, text
    print("decode_table: ok")


if __name__ == "__main__":
    main()
