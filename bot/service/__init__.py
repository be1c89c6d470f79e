"""The job service: submit, decide, cancel, read and follow jobs, with the access rules;
the API, the web pages and the CLI all call it. No web framework here."""
