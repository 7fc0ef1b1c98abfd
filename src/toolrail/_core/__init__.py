"""What a call reads of its registry: ``Core`` (the layers, the chains, the guards, the
approver, the logger), the ``Entry`` each registered tool is compiled into, the
middleware ``Chains``, and the presentation modes of code mode."""
