from wedgewatch.cli import main

main()
