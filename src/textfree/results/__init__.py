"""Experiment records, below every system: the cell schema, result files, report commands and plots.

* :mod:`.cell`: :class:`~textfree.results.cell.Cell`, a YAML cell as data (its kind's checks are installed by
  :mod:`textfree.experiments`, which runs cells);
* :mod:`.files`: result files (:func:`~textfree.results.files.load_results`, ``ResultsError``);
* :mod:`.report_command`: the body of the ``report`` commands;
* :mod:`.plot`: figures drawn from result files only.

Systems' reports (``textfree.ppft.report``, ``textfree.attacks.report``) read results through this package, so that
they never import the runner, which imports them.
"""
