-- The floor of any script (ours, for bench/peers.py): EVALSHA of a script that does nothing.
return 1
