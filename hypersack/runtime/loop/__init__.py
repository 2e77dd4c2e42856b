"""The study loop (the only while-loop), its heap and progress view, and the Executor and Store
protocols it drives.

The one assembly of a run is ``assemble.assemble``: local runs (``Study._drive_here``), Ray
(``Study._drive_on_ray``) and the simulator (``sim.run.simulate``) each build their executor and
store and hand them to it; it alone sets the controller's inventory, packs and time-sharing, adds
the driver's observers and sample sink, and calls ``run.run_loop``. Executors never import the
loop beyond its protocol (``executor``)."""
