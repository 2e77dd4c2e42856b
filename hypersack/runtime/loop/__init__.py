"""The study loop (the only while-loop), its heap and progress view, and the Executor and Store
protocols it drives.

The one assembly of a run is ``assemble.assemble``: local runs (``Study._assembled_here``), Ray
(``Study._assembled_on_ray``) and the simulator (``sim.run.simulate``) each build their executor
and store and hand them to it; it alone builds the controller with its inventory, packs and
time-sharing (``core.controller.ControllerOptions``), and its ``Assembly.run`` adds the driver's
observers and sample sink and calls ``run.run_loop``. Each turn of the loop is one
``controller.turn(events, now)``; the loop stores its result, then sends commands, acks (it picks
them: ``run.acknowledgements``) and launches. Executors never import the loop beyond its protocol
(``executor``), nor call back into the controller."""
