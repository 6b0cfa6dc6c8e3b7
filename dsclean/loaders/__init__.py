"""Loader profiles: the decoders training will run, called exactly as training calls them (issue 27).

- :mod:`.profiles`: the registry (one table, one function a profile) and :func:`~.profiles.require`;
- :mod:`.compare`: the tolerance between a profile's decode and the reference decode;
- :mod:`.check`: what ``scan --loader`` adds to a verdict (``loader_fails``, ``loader_differs``).
"""
