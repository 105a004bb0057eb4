"""The single controller: one driver process calls groups of SPMD workers like single objects.

``verl.single_controller.base`` has the backend-neutral pieces (``Worker``, ``WorkerGroup``, the
``register`` decorator); ``verl.single_controller.ray`` runs workers as Ray actors (importing it
imports Ray; nothing else here does).
"""
