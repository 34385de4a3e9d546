"""One Dask worker on one device: the same graph on kiln chunks, CuPy chunks and NumPy chunks.

    python crates/kiln-py/bench/dask_gpu.py [--rows 8000] [--cols 4096] [--chunk 1000] [--runs 3]

A `LocalCluster` of one worker process with one thread (`kiln.dask.DevicePlugin` pins it to
`--device`, default gpu:0). A float32 (rows, cols) array is made by `da.random` in the worker,
turned into chunks of each library (`map_blocks(kiln.asarray)`, `cupy.asarray`, NumPy as made)
and persisted there, so the timed part is the compute alone:

- `chain`: `((x - 0.5) ** 2 * 3 + x).sum(axis=0)`, an elementwise chain and a tree reduction;
- `gram`: `(x.T @ x).sum(axis=0)`, blockwise products summed over the row chunks;
- `slice_reduce`: `x[::3, 7:-5].max(axis=1).sum()` after a rechunk.

Each result is small and read back to the client (as NumPy), and checked against NumPy's result
of the same graph. Prints milliseconds (best of --runs after one warm-up) per graph and library,
and kiln's ratio to each. A library that is not installed (CuPy on a machine without CUDA) is
skipped with a line saying so. Exit status 0 always (a benchmark, not a test)."""

import argparse
import time

import numpy as np


def graphs(x):
    import dask.array as da

    return {
        "chain": ((x - 0.5) ** 2 * 3 + x).sum(axis=0),
        "gram": (x.T @ x).sum(axis=0),
        "slice_reduce": da.rechunk(x, (x.chunks[0][0] * 2, x.shape[1] // 2))[::3, 7:-5].max(axis=1).sum(),
    }


def to_numpy(v):
    if hasattr(v, "get"):  # CuPy
        return v.get()
    return np.asarray(v)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=8000)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--chunk", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--device", default="gpu:0")
    args = ap.parse_args()

    import dask.array as da
    from distributed import Client, LocalCluster, wait

    import kiln
    import kiln.dask

    cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None)
    client = Client(cluster)
    client.register_plugin(kiln.dask.DevicePlugin([args.device]))
    base = da.random.default_rng(0).random((args.rows, args.cols), chunks=(args.chunk, args.cols), dtype="float32")
    base = client.persist(base)
    wait(base)

    libs = {"numpy": lambda b: b}
    libs["kiln"] = lambda b: b.map_blocks(kiln.asarray)
    try:
        import cupy

        libs["cupy"] = lambda b: b.map_blocks(cupy.asarray, meta=cupy.empty((0, 0), dtype="float32"))
        client.run(lambda: cupy.cuda.runtime.getDeviceCount())
    except Exception as e:  # no CUDA, or CuPy missing in the worker
        print(f"dask_gpu: CuPy skipped ({type(e).__name__}: {e})")
        libs.pop("cupy", None)

    print(f"dask_gpu: ({args.rows}, {args.cols}) float32 in row chunks of {args.chunk}, one worker on "
          f"{args.device} (kiln device {client.submit(lambda: str(kiln.asarray([1.0]).device)).result()})")
    times, results = {}, {}
    for lib, make in libs.items():
        x = client.persist(make(base))
        wait(x)
        for name, g in graphs(x).items():
            best = float("inf")
            for i in range(args.runs + 1):
                t = time.perf_counter()
                v = g.compute()
                dt = time.perf_counter() - t
                if i:
                    best = min(best, dt)
            times[(lib, name)] = best * 1e3
            results[(lib, name)] = to_numpy(v)
        del x
    print(f"{'graph':14} " + " ".join(f"{lib + ' ms':>11}" for lib in libs) + "  kiln/numpy  kiln/cupy")
    for name in graphs(base):
        want = results[("numpy", name)]
        for lib in libs:
            got = results[(lib, name)]
            if not np.allclose(got, want, rtol=2e-3, atol=1e-3 * float(np.abs(want).max() or 1)):
                print(f"dask_gpu: {lib} {name} DIFFERS from NumPy: max abs error {np.abs(got - want).max()}")
        row = " ".join(f"{times[(lib, name)]:11.2f}" for lib in libs)
        k = times[("kiln", name)]
        vs_cupy = f"{times[('cupy', name)] / k:9.2f}x" if "cupy" in libs else "        -"
        # Ratios as speed-ups: above 1 means kiln is faster.
        print(f"{name:14} {row}  {times[('numpy', name)] / k:9.2f}x  {vs_cupy}")
    client.close()
    cluster.close()


if __name__ == "__main__":
    main()
