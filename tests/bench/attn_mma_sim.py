# attn_mma_sim.py: attention.cu's attention_decode_mma_kernel fragment mapping (one warp, one round of 32 keys,
# masked keys' K / V rows NaN) simulated in exact arithmetic against plain attention; prints the max |diff| per case.
# Run: python3 tests/bench/attn_mma_sim.py (expect ~1e-16).
import random, math
def run(HD, G, masked):
    NU, NT = HD // 32, HD // 8
    rnd = random.Random(HD * 10 + G)
    Q = [[rnd.uniform(-1, 1) for _ in range(HD)] for _ in range(G)]
    K = [[rnd.uniform(-1, 1) for _ in range(HD)] for _ in range(32)]
    V = [[rnd.uniform(-1, 1) for _ in range(HD)] for _ in range(32)]
    for j in masked: K[j] = [float('nan')] * HD; V[j] = [float('nan')] * HD
    mask = [(-math.inf if j in masked else 0.0) for j in range(32)]
    scale = 1 / math.sqrt(HD)
    # reference
    ref = []
    for g in range(G):
        s = [sum(Q[g][d] * K[j][d] for d in range(HD)) * scale + mask[j] if mask[j] != -math.inf else -math.inf for j in range(32)]
        m = max(s); p = [0 if x == -math.inf else math.exp(x - m) for x in s]; l = sum(p)
        ref.append([sum(p[j] * V[j][d] for j in range(32) if p[j] != 0) / l for d in range(HD)])
    def mma(Cfr, Afr, Bfr):  # per-lane fragments -> new per-lane C
        A = [[0.0] * 16 for _ in range(16)]; B = [[0.0] * 8 for _ in range(16)]
        for lane in range(32):
            g, c = lane // 4, lane % 4
            a = Afr[lane]; A[g][2*c], A[g][2*c+1] = a[0]; A[g+8][2*c], A[g+8][2*c+1] = a[1]
            A[g][2*c+8], A[g][2*c+9] = a[2]; A[g+8][2*c+8], A[g+8][2*c+9] = a[3]
            b = Bfr[lane]; B[2*c][g], B[2*c+1][g] = b[0]; B[2*c+8][g], B[2*c+9][g] = b[1]
        D = [[sum(A[m][k] * B[k][n] for k in range(16)) for n in range(8)] for m in range(16)]
        out = []
        for lane in range(32):
            g, c = lane // 4, lane % 4; cc = Cfr[lane]
            out.append([cc[0] + D[g][2*c], cc[1] + D[g][2*c+1], cc[2] + D[g+8][2*c], cc[3] + D[g+8][2*c+1]])
        return out
    Z = (0.0, 0.0)
    # per lane state
    qa = {}
    for lane in range(32):
        g, c = lane // 4, lane % 4
        for u in range(NU):
            x = [Q[g][32*u + 8*c + i] if g < G else 0.0 for i in range(8)]
            qa[lane, u, 0] = ((x[0], x[1]), (x[2], x[3])); qa[lane, u, 1] = ((x[4], x[5]), (x[6], x[7]))
    sc = {nt: [[0.0]*4 for _ in range(32)] for nt in range(4)}
    for nt in range(4):
        for u in range(NU):
            for h in range(2):
                Afr, Bfr = [], []
                for lane in range(32):
                    g, c = lane // 4, lane % 4
                    a0, a2 = qa[lane, u, h]; Afr.append((a0, Z, a2, Z))
                    row = K[8*nt + g]; w = [(row[32*u + 8*c + 2*i], row[32*u + 8*c + 2*i + 1]) for i in range(4)]
                    Bfr.append((w[2*h], w[2*h+1]))
                sc[nt] = mma(sc[nt], Afr, Bfr)
    # softmax per lane
    p = {}; M = {}; Lp = {}
    for lane in range(32):
        g, c = lane // 4, lane % 4
        for nt in range(4):
            for e in range(2):
                j = 8*nt + 2*c + e
                p[lane, nt, e] = sc[nt][lane][e] * scale + mask[j] if mask[j] != -math.inf else -math.inf
    for g in range(8):
        lanes = [4*g + c for c in range(4)]
        m = max(p[l, nt, e] for l in lanes for nt in range(4) for e in range(2))
        for l in lanes:
            M[l] = m; s = 0
            for nt in range(4):
                for e in range(2):
                    v = p[l, nt, e]; v = 0.0 if v == -math.inf or g >= G else math.exp(v - m); p[l, nt, e] = v; s += v
            Lp[l] = s
    # P V as O^T = V^T P^T: m-tile mt rows g / g + 8 = dims g NT + 2 mt / + 1, columns = heads
    o = {mt: [[0.0]*4 for _ in range(32)] for mt in range(NT // 2)}
    for ks in range(2):
        for mt in range(NT // 2):
            Afr, Bfr = [], []
            for lane in range(32):
                g, c = lane // 4, lane % 4
                Bfr.append(((p[lane, 2*ks, 0], p[lane, 2*ks, 1]), (p[lane, 2*ks+1, 0], p[lane, 2*ks+1, 1])))
                rows = []
                for e4 in range(4):
                    j = 16*ks + 2*c + (e4 & 1) + 8*(e4 >> 1)
                    live = mask[8*(2*ks + (e4 >> 1)) + 2*c + (e4 & 1)] != -math.inf
                    rows.append([V[j][g*NT + i] if live else 0.0 for i in range(NT)])
                lo = [r[2*mt] for r in rows]; hi = [r[2*mt + 1] for r in rows]
                Afr.append(((lo[0], lo[1]), (hi[0], hi[1]), (lo[2], lo[3]), (hi[2], hi[3])))
            o[mt] = mma(o[mt], Afr, Bfr)
    worst = 0
    for lane in range(32):
        g, c = lane // 4, lane % 4
        for mt in range(NT // 2):
            d = g*NT + 2*mt
            for k, h, dd in ((0, 2*c, d), (1, 2*c+1, d), (2, 2*c, d+1), (3, 2*c+1, d+1)):
                if h >= G: continue
                L = sum(Lp[4*h + cc] for cc in range(4))
                worst = max(worst, abs(o[mt][lane][k] / L - ref[h][dd]))
    return worst
CASES = ((128, 4, set()), (128, 3, {5, 17, 31}), (128, 8, {2}), (64, 4, {0, 9}), (64, 2, set()), (64, 1, {30}))
for HD, G, masked in CASES:
    print(HD, G, sorted(masked), "max |diff|", run(HD, G, masked))
