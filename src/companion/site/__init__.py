"""The site: the book build (:mod:`~companion.site.book`), the Sphinx extension (:mod:`~companion.site.sphinx_ext`,
with its CSS and search script in ``_static/``), the "Where is each result" table (:mod:`~companion.site.where`)
and the Sweeps page (:mod:`~companion.site.sweeps_page`)."""
