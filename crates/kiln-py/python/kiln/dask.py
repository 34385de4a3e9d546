"""kiln tensors as Dask chunks: a worker plugin that pins each worker to its own device, and the
chunk-size hook Dask's memory accounting needs.

Tensors implement NumPy's ``__array_function__`` and ``__array_ufunc__`` (``kiln._array_function``,
``kiln._ufunc``), so ``dask.array.from_array(x, chunks=...).map_blocks(kiln.asarray)`` is a Dask
array whose chunks are tensors; elementwise chains, reductions, products, rechunking and slicing run
on the chunks' device. ``map_blocks(kiln.asarray)`` puts each chunk on the default device
(``KILN_DEVICE``, else auto) of the process that runs it; with ``dask.distributed``,
``DevicePlugin`` sets that per worker:

    from distributed import Client, LocalCluster
    import kiln.dask
    client = Client(LocalCluster(n_workers=2, processes=True, threads_per_worker=1))
    client.register_plugin(kiln.dask.DevicePlugin())      # worker 0 -> gpu:0, worker 1 -> gpu:1, ...

Dask is imported only when ``DevicePlugin`` is first used, so kiln works without Dask installed.
"""

import os

import kiln as _k

__all__ = ["DevicePlugin", "device_for", "register_sizeof", "worker_device"]


def register_sizeof(sizeof):
    """Tells Dask a tensor's size is its ``nbytes`` (for spilling and memory limits). Dask calls this
    through the ``dask.sizeof`` entry point of kiln's package metadata; kiln.dask calls it too."""
    @sizeof.register(_k.Tensor)
    def _sizeof_tensor(t):
        return int(t.nbytes)


def device_for(index, devices=None):
    """The device name worker number `index` gets: ``devices[index % len(devices)]``. `devices`
    defaults to every hardware GPU (``gpu:0``, ``gpu:1``, ...; wgpu lists them before software
    adapters), or ``["cpu"]`` without one, as ``Device("auto")`` chooses; a string is one device for
    every worker."""
    if devices is None:
        n = sum(1 for a in _k.Device.adapters() if not a[3])
        devices = [f"gpu:{i}" for i in range(n)] or ["cpu"]
    elif isinstance(devices, str):
        devices = [devices]
    devices = list(devices)
    if not devices:
        raise ValueError("DevicePlugin: devices is empty")
    return devices[index % len(devices)]


def _worker_index(worker, fallback):
    """The worker's number: its name when it is an integer (LocalCluster names workers 0, 1, ...;
    ``dask worker --name 3``), else `fallback` (a count kept by the plugin's copy on the scheduler is
    not visible to workers, so name workers with integers for a stable round robin)."""
    try:
        return int(worker.name)
    except (TypeError, ValueError):
        return fallback


def worker_device():
    """The default device of this process (the one ``DevicePlugin`` pinned on a worker)."""
    return _k.Device()


def _plugin_class():
    from distributed.diagnostics.plugin import WorkerPlugin

    class DevicePlugin(WorkerPlugin):
        """A ``dask.distributed`` worker plugin: worker ``i`` (its integer name) opens
        ``devices[i % len(devices)]`` as its default device (``KILN_DEVICE``), so
        ``map_blocks(kiln.asarray)`` and tensors unpickled there land on it. ``devices``: a list of
        device names ("gpu:0", "cpu", ...), one name, or None for every GPU adapter round robin
        (the CPU without one). Register it before the workers compute any tensor: a process opens
        its default device once, and setup raises RuntimeError if it was already another one."""

        name = "kiln-device"
        idempotent = True

        def __init__(self, devices=None):
            self.devices = devices

        def setup(self, worker):
            import dask.sizeof

            name = device_for(_worker_index(worker, hash(worker.address)), self.devices)
            os.environ["KILN_DEVICE"] = name
            got = _k.Device()
            if got != _k.Device(name):
                raise RuntimeError(f"kiln.dask.DevicePlugin: worker {worker.name} should use {name}, but its "
                                   f"default device was already opened as {got.name}")
            register_sizeof(dask.sizeof.sizeof)
            self.device = name

    DevicePlugin.__module__ = __name__
    return DevicePlugin


_CLASSES = {}


def __getattr__(name):
    # DevicePlugin subclasses distributed's WorkerPlugin, so it is built on first use.
    if name == "DevicePlugin":
        if name not in _CLASSES:
            _CLASSES[name] = _plugin_class()
        return _CLASSES[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
