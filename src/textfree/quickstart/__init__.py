"""``textfree quickstart``: privatized semantic search through a real local server, in one command.

* :mod:`.corpus`: the packaged FAQ (public answers, private questions that ask for them in other words);
* :mod:`.server`: a real ``textfree serve`` process on loopback with a fresh API key, stopped at the end;
* :mod:`.wire`: every request the client sent, recorded at its HTTP layer;
* :mod:`.search`: cosine search and top-1 / top-3 accuracy;
* :mod:`.runner`: the run (privatize here, send only the payload, search the server's answers per eta);
* :mod:`.report`: what the command prints.

Nothing in textfree imports this package; it imports the client, the server and SnD.
"""
