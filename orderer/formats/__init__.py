"""The files evb reads and writes, each format in one place: the orderer's two logs on disk
(:mod:`~orderer.formats.log_format`: Arrow IPC segments, the torn-tail rule), the JSON Lines of
``evb replay`` (:mod:`~orderer.formats.json_lines`: its input records and its output) and how a
command's result files are written (:mod:`~orderer.formats.result_files`: never over the input,
in place only once whole).

The service writes the logs, and the replay, the command-line applications and the Spark job
read them; so this package imports only the orderer's domain (batches, configuration, errors),
never the service, the replay or an application. NSCLDAQ's formats are :mod:`orderer.nscldaq`.
"""
