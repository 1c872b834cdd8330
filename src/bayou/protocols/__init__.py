"""Sans-IO codecs, one package per wire protocol. They import only bayou.records and bayou.errors."""
