"""ncu_kernels.py CSV: a decode (or any) run's kernels under ncu, grouped by kind (name without namespaces, grid):
count, median time, median DRAM read rate, share of the serialized total. The CSV comes from
    ncu --clock-control none --print-units base --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv \\
        tessera bench -m FILE -p 0 -n 3 -r 1 --no-warmup > run.csv
ncu runs kernels one at a time: small kernels' times are their own, without the overlap PDL gives in the graph."""
import collections
import csv
import re
import statistics
import sys


def short(name):
    s = re.sub(r"[(<`][^()<>`]*(namespace|unnamed)[^()<>`]*[)>']::", "", name)  # anonymous namespaces
    s = re.sub(r"^void\s+", "", s)
    s = s.split("(", 1)[0]  # the parameter list
    s = re.sub(r"\b\w+::", "", s)  # namespace qualifiers, in template arguments too
    return (s or name)[:70]


def main(path):
    rows = [r for r in csv.reader(open(path)) if len(r) > 10]
    if not rows:
        sys.exit(f"{path}: no ncu rows")
    h = rows[0]
    ii, ki, gi = h.index("ID"), h.index("Kernel Name"), h.index("Grid Size")
    mi, vi = h.index("Metric Name"), h.index("Metric Value")
    kernels = collections.OrderedDict()
    for r in rows[1:]:
        d = kernels.setdefault(r[ii], {"name": r[ki], "grid": r[gi]})
        try:
            d[r[mi]] = float(r[vi].replace(",", ""))
        except ValueError:
            pass
    ks = list(kernels.values())
    t_of = lambda d: d.get("gpu__time_duration.sum", 0.0)  # ns
    total = sum(t_of(d) for d in ks) or 1.0
    print(f"{len(ks)} kernels, {total / 1e3:.0f} us serialized")
    print(f"{'kernel':70} {'grid':>16} {'n':>5} {'med us':>8} {'GB/s':>7} {'share':>6}")
    groups = collections.OrderedDict()
    for d in ks:
        groups.setdefault((short(d["name"]), d["grid"]), []).append(d)
    for (name, grid), ds in sorted(groups.items(), key=lambda g: -sum(t_of(d) for d in g[1])):
        t = [t_of(d) for d in ds]
        rates = [d.get("dram__bytes_read.sum", 0.0) / t_of(d) for d in ds if t_of(d) > 0]  # bytes / ns = GB/s
        print(f"{name:70} {grid:>16} {len(ds):5d} {statistics.median(t) / 1e3:8.2f} "
              f"{statistics.median(rates) if rates else 0:7.0f} {sum(t) / total * 100:5.1f}%")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: ncu_kernels.py RUN.csv")
    main(sys.argv[1])
