"""The report as one self-contained HTML page: the Markdown report's lines rendered (headings, paragraphs,
tables, fenced code, diffs) with every image inlined as a base64 data URI, so the file opens anywhere, offline.

Only the Markdown that the report itself writes is understood; it is not a general Markdown renderer.
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path
from typing import Iterator, Sequence

_IMAGE = re.compile(r"^!\[([^\]]*)\]\(([^)]+)\)$")
_INLINE = re.compile(r"`([^`]+)`|\*\*([^*]+)\*\*")

CSS = """
body{font:15px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
main{max-width:1100px;margin:0 auto;padding:24px 32px 64px;background:#fff}
h1{font-size:26px;border-bottom:2px solid #3b6fd8;padding-bottom:6px}
h2{font-size:21px;margin-top:36px;border-bottom:1px solid #dde2ea;padding-bottom:4px}
h3{font-size:17px;margin-top:26px}h4{font-size:15px;margin-top:20px}
table{border-collapse:collapse;margin:8px 0 16px;font-size:13px;display:block;overflow-x:auto}
th,td{border:1px solid #dde2ea;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eef2f8}tr:nth-child(even) td{background:#fafbfc}
img{max-width:100%;border:1px solid #e4e7ec;margin:4px 0 12px}
pre{white-space:pre-wrap;background:#f3f4f7;padding:10px 12px;overflow-x:auto;font-size:12.5px;border-radius:4px}
code{font-family:ui-monospace,Menlo,Consolas,monospace}p code{background:#f0f2f5;padding:0 3px}
.add{color:#116329;background:#e6ffec;display:block}.del{color:#82071e;background:#ffebe9;display:block}
.hunk{color:#6a737d;display:block}nav{font-size:13px;margin-bottom:16px}nav a{margin-right:12px}
"""


def _inline(text: str) -> str:
    out, pos = [], 0
    for m in _INLINE.finditer(text):
        out.append(html.escape(text[pos:m.start()]))
        out.append(f"<code>{html.escape(m.group(1))}</code>" if m.group(1) is not None
                   else f"<strong>{_inline(m.group(2))}</strong>")
        pos = m.end()
    out.append(html.escape(text[pos:]))
    return "".join(out)


def _cells(line: str) -> list[str]:
    parts = re.split(r"(?<!\\)\|", line.strip().strip("|")) if line.strip() != "|" else []
    return [p.strip().replace("\\|", "|") for p in parts]


def data_uri(path: Path) -> str:
    """A file as a ``data:`` URI (PNG/SVG/JPEG by suffix)."""
    kind = {".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg", ".jpeg": "image/jpeg"}
    mime = kind.get(path.suffix.lower(), "application/octet-stream")
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


def _code(lang: str, body: list[str]) -> str:
    if lang != "diff":
        return f"<pre><code>{html.escape(chr(10).join(body))}</code></pre>"
    spans = []
    for line in "\n".join(body).splitlines():  # an element of the report's lines may hold several lines
        cls = ("hunk" if line.startswith("@@") else "add" if line.startswith("+") and not line.startswith("+++")
               else "del" if line.startswith("-") and not line.startswith("---") else "")
        spans.append(f'<span class="{cls}">{html.escape(line)}</span>' if cls else html.escape(line))
    return "<pre class=\"diff\"><code>" + "\n".join(spans) + "</code></pre>"


def _blocks(lines: Sequence[str], base: Path) -> Iterator[str]:
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), len(lines))
            yield _code(line[3:].strip(), list(lines[i + 1:end]))
            i = end + 1
        elif re.match(r"^#{1,6} ", line):
            level = len(line) - len(line.lstrip("#"))
            title = line[level:].strip()
            anchor = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
            yield f'<h{level} id="{anchor}">{_inline(title)}</h{level}>'
            i += 1
        elif line.startswith("|"):
            end = i
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            header, rows = _cells(lines[i]), [_cells(r) for r in lines[i + 2:end]]
            head = "".join(f"<th>{_inline(c)}</th>" for c in header)
            body = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in rows)
            yield f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
            i = end
        elif _IMAGE.match(line):
            alt, rel = _IMAGE.match(line).groups()  # type: ignore[union-attr]
            yield f'<img alt="{html.escape(alt)}" src="{data_uri(base / rel)}">'
            i += 1
        elif line.strip():
            end = i
            while end < len(lines) and lines[end].strip() and not re.match(r"^(#|\||```|!\[)", lines[end]):
                end += 1
            yield "<p>" + " ".join(_inline(x) for x in lines[i:end]) + "</p>"
            i = max(end, i + 1)
        else:
            i += 1


def render_html(lines: Sequence[str], base: Path, title: str) -> str:
    """The page for the Markdown ``lines``; image paths are relative to ``base``."""
    nav = [ln for ln in lines if ln.startswith("## ")]
    if len(nav) == 1:  # one run: its sections are the entries
        nav = [ln for ln in lines if ln.startswith("### ")]
    titles = [ln.lstrip("#").strip() for ln in nav]
    links = "".join(f'<a href="#{re.sub(r"[^a-z0-9]+", "-", t.lower()).strip("-")}">{html.escape(t)}</a>'
                    for t in titles)
    blocks = list(_blocks(lines, base))
    body = "\n".join(blocks[:1] + [f"<nav>{links}</nav>"] + blocks[1:])  # the contents under the title
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f'<meta name="viewport" content="width=device-width,initial-scale=1"><style>{CSS}</style></head>\n'
            f"<body><main>\n{body}\n</main></body></html>\n")


__all__ = ["data_uri", "render_html"]
