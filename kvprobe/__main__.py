from kvprobe.cli import main

main()
