"""Summary of an ncu source page (ncu -i REP --page source --csv --print-source sass): the instructions with the most
warp stall samples (their three main reasons), and the samples in three stretches of the code: up to the consumers'
wgmma drain (`WARPGROUP.DEPBAR.LE gsb0, 0x0`), the epilogue (up to the last global store) and the rest (in both
kernels' layout, the producer's code).
Usage: python3 wq_stalls.py SOURCE.csv [TOP]"""
import csv
import sys


def main():
    rows = list(csv.reader(open(sys.argv[1])))
    top_n = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    head, data = rows[1], rows[2:]
    i_samples = head.index("Warp Stall Sampling (All Samples)")
    i_exec = head.index("Instructions Executed")
    i_src = head.index("Source")
    reasons = [i for i, c in enumerate(head) if c.startswith("stall_") and "Not Issued" not in c]
    samples = [int(r[i_samples] or 0) for r in data]
    total = sum(samples) or 1
    print(rows[0][1][:100])
    print(f"{total} samples, {sum(int(r[i_exec] or 0) for r in data)} warp instructions executed")
    drain = [i for i, r in enumerate(data) if "DEPBAR.LE gsb0, 0x0" in r[i_src]]
    stores = [i for i, r in enumerate(data) if "STG" in r[i_src]]
    if drain and stores:
        parts = [sum(samples[: drain[0]]), sum(samples[drain[0] : stores[-1] + 2]), sum(samples[stores[-1] + 2 :])]
        print(", ".join(f"{name} {n} ({100 * n / total:.1f}%)"
                        for name, n in zip(("to the drain", "epilogue", "rest"), parts)))
    for i in sorted(range(len(data)), key=lambda i: -samples[i])[:top_n]:
        r = data[i]
        why = sorted(((int(r[c] or 0), head[c][6:]) for c in reasons), reverse=True)[:3]
        why = ", ".join(f"{name} {n}" for n, name in why if n)
        print(f"{i:5d} {samples[i]:6d} {100 * samples[i] / total:5.1f}%  x{int(r[i_exec] or 0):<7d} "
              f"{r[i_src].strip()[:56]:56s} {why}")


if __name__ == "__main__":
    main()
