"""Detector kinds: one interface (``interface.DetectorKind``), one registry (``registry``), one
module per kind (``kinds.cnn``, ``kinds.logger_stats``, ``kinds.fused``).

A detector file names its kind (``kind``: absent means ``cnn``, as files written before the
field). Every surface that takes a detector of any kind (predict, serve, explain, export,
promote, ship and its card) loads it through ``registry.load_any_detector`` and asks
``registry.kind_of(detector)`` for what it needs; none of them names a kind. A new kind is
one module that implements ``DetectorKind`` and is registered (``registry.register``; a
built-in one is listed in ``kinds.BUILT_IN``): docs/architecture.md, "Detector kinds".

The interface and the registry sit low in the layers (just above the detector files), so a
surface at any layer may call them; the kinds' modules sit at the top (just below the
commands), because a kind wires pieces of every layer (its rows, its served scorer, its
graph, its card, its fitting in `ship`). The registry imports the built-in kinds inside
``registry.built_in``: the one import that points up.
"""
