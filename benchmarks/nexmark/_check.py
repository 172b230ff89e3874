"""``--check``: a query's answer computed by DuckDB over the generator's Parquet files,
with the SQL that docs/nexmark.md holds for it (run verbatim: that SQL is the query's
definition), compared row by row with the topology's result file."""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from benchmarks.nexmark._model import KINDS
from benchmarks.nexmark._queries import RESULT_COLUMNS

#: the page that holds each query's SQL, in a ```sql block whose first line is
#: ``-- nexmark qK: ...``
DOCS = Path(__file__).resolve().parents[2] / "docs" / "nexmark.md"
_SQL_BLOCK = re.compile(r"```sql\n(-- nexmark (q\d+)\b.*?)```", re.DOTALL)

#: differing rows shown per side at most
SHOW_ROWS = 10


def query_sql(query: str, docs: Path = DOCS) -> str:
    """The SQL of ``query`` as docs/nexmark.md writes it (its ```sql block, verbatim).

    Raises:
        KeyError: the page has no block for ``query``.
        FileNotFoundError: no docs/nexmark.md (run from a checkout of the repository).
    """
    blocks = {m.group(2): m.group(1) for m in _SQL_BLOCK.finditer(docs.read_text())}
    if query not in blocks:
        raise KeyError(f"{docs} has no ```sql block starting '-- nexmark {query}:'; it has "
                       f"{sorted(blocks)}")
    return blocks[query]


def _normal(row: tuple) -> tuple:
    """A row with each float rounded to 12 significant digits: a mean DuckDB computes
    in another order may differ from ours in its last bits."""
    return tuple(float(f"{v:.12g}") if isinstance(v, float) else v for v in row)


@dataclass
class CheckResult:
    """The outcome of a check: ``passed``, the rows compared, and what to print."""

    query: str
    passed: bool
    rows: int
    report: str


def check(query: str, result: str | os.PathLike, data_dir: str | os.PathLike) -> CheckResult:
    """Compare the Parquet file ``result`` of ``query`` with DuckDB's answer over
    ``person.parquet``, ``auction.parquet`` and ``bid.parquet`` in ``data_dir``: the
    same columns (names and order, Arrow types int64/float64/string) and the same rows
    as a multiset. Blocks while DuckDB runs (in this process, in memory).

    Raises:
        KeyError: no SQL for ``query`` in docs/nexmark.md.
        FileNotFoundError: a missing data or result file.
    """
    import duckdb
    import pyarrow.parquet as pq

    sql = query_sql(query)
    data = Path(data_dir)
    con = duckdb.connect()
    for kind in KINDS:
        path = data / f"{kind}.parquet"
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing; make it with "
                                    f"'python -m benchmarks.nexmark generate --out {data}'")
        literal = str(path).replace("'", "''")
        con.execute(f"CREATE VIEW {kind} AS SELECT * FROM read_parquet('{literal}')")
    expected = con.execute(sql).fetchall()
    expected_names = [d[0] for d in con.description]
    table = pq.read_table(result)
    want = [(n, t) for n, t in RESULT_COLUMNS[query]]
    got_columns = [(f.name, str(f.type).replace("double", "float64")) for f in table.schema]
    lines = []
    if got_columns != want:
        lines.append(f"result columns {got_columns}, specified {want}")
    if expected_names != [n for n, _ in want]:
        lines.append(f"the SQL's columns {expected_names}, specified {[n for n, _ in want]}")
    got = list(zip(*(c.to_pylist() for c in table.columns), strict=True))
    missing = Counter(map(_normal, expected)) - Counter(map(_normal, got))
    extra = Counter(map(_normal, got)) - Counter(map(_normal, expected))
    for label, rows in (("missing from the result (DuckDB has them)", missing),
                        ("in the result only (DuckDB has not)", extra)):
        if rows:
            lines.append(f"{sum(rows.values()):,} rows {label}, e.g.:")
            lines += [f"  {row} x{n}" for row, n in list(rows.items())[:SHOW_ROWS]]
    if lines:
        return CheckResult(query, False, len(got), "\n".join(
            [f"CHECK FAILED {query}: {len(got):,} rows in the result, {len(expected):,} "
             f"from DuckDB"] + lines))
    return CheckResult(query, True, len(got),
                       f"CHECK PASSED {query}: {len(got):,} rows equal DuckDB's")
