"""The flags of the ``evb`` commands that another program writes, defined once for both: the
command line's parser adds them to its subcommands, and the operator writes the pods' command
lines from typed commands whose arguments come from the same parser.

Why a package below the command line: the operator writes ``evb serve`` (the orderer's pod)
and ``evb forward`` (the forwarders' pods), and may not import :mod:`orderer.cli`
(``.importlinter``: the command line and the operator are one layer, neither importing the
other). So the flags it writes are defined here, where both can reach them, and no other place
spells one: a typed command's arguments are found by its fields' names among the parser's
actions (:mod:`~orderer.flags.argv`), and a property test holds that ``evb`` reads them back
into the same command.

The modules: :mod:`~orderer.flags.values` (the flags' value types and names),
:mod:`~orderer.flags.argv` (a typed command's arguments, both ways), :mod:`~orderer.flags.serve`
(``evb serve``'s service flags, :class:`~orderer.flags.serve.ServeCommand`),
:mod:`~orderer.flags.forward` (what ``evb forward`` forwards where,
:class:`~orderer.flags.forward.ForwardCommand`). The Spark job's command line is
:mod:`orderer.job_config`'s.
"""
