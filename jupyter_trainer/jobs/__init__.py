"""A job as its user handles it: submit, look (status checks off the views' thread), stop, remove, prune."""
