"""The book's pages, one module per page, each generated from the one source of its facts.

markup: the Markdown/HTML pieces every page uses (tables, badges); runs: which recorded runs the book
publishes and where; intro, recipe, pitfalls, lanes, speed, trail: the pages themselves. lanebook.site.book
stages them and runs jupyter-book; lanebook.site.bookcheck checks the built site.
"""
